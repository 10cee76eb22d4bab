import { Controller, Delete, Get, HttpCode, Param, Post, Req, Res } from '@nestjs/common';
import type { Request, Response } from 'express';
import { CurrentUser, type Principal } from '../auth/auth.decorators.js';
import { DomainError } from '../common/problem.js';
import { StoredFiles } from '../files/stored-files.js';
import { FairShare } from '../users/fair-share.js';
import { StoredFileDto } from './files.dto.js';
import { UploadParser } from './upload.js';

/** Another user's file, a missing one and an expired one are answered alike. */
function fileNotFound(id: string): DomainError {
  return new DomainError('not_found', `File ${id.slice(0, 80)} was not found.`);
}

/** `POST /files`, `GET /files/{id}`, `DELETE /files/{id}`: images stored once and named in later JSON jobs. */
@Controller('files')
export class FilesController {
  constructor(
    private readonly uploads: UploadParser,
    private readonly files: StoredFiles,
    private readonly fairShare: FairShare,
  ) {}

  @Post()
  async upload(@CurrentUser() user: Principal, @Req() request: Request, @Res() response: Response): Promise<void> {
    // An upload in progress, as a job creation's is: counted from before its first byte until all of it is read.
    const uploading = await this.fairShare.take(user.userId, 'uploads', response);
    const image = await this.uploads.parseFile(request, response).finally(uploading);
    let stored;
    try {
      stored = await this.files.store(user.userId, image);
    } catch (error) {
      await this.uploads.discard({ images: { file: image } });
      throw error;
    }
    response.status(201).location(`/files/${stored.id}`).json(StoredFileDto.of(stored));
  }

  @Get(':id')
  async get(@CurrentUser() user: Principal, @Param('id') id: string): Promise<StoredFileDto> {
    const file = await this.files.find(user.userId, id);
    if (!file) throw fileNotFound(id);
    return StoredFileDto.of(file);
  }

  @Delete(':id')
  @HttpCode(204)
  async delete(@CurrentUser() user: Principal, @Param('id') id: string): Promise<void> {
    if (!(await this.files.remove(user.userId, id))) throw fileNotFound(id);
  }
}
