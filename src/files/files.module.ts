import { Module } from '@nestjs/common';
import { TypeOrmModule } from '@nestjs/typeorm';
import { StoredFile } from './stored-file.entity.js';
import { StoredFileRepository } from './stored-file.repository.js';
import { StoredFiles } from './stored-files.js';

export const FILE_ENTITIES = [StoredFile];

/**
 * Users' stored files (`POST /files`): their rows and bytes, as job creation, the files' own routes, their sweep and a
 * user's removal use them.
 */
@Module({
  imports: [TypeOrmModule.forFeature(FILE_ENTITIES)],
  providers: [StoredFileRepository, StoredFiles],
  exports: [StoredFileRepository, StoredFiles],
})
export class FilesModule {}
