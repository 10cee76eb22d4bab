import type { StoredFileRow } from '../files/stored-file.repository.js';
import type { components } from '../generated/openapi.js';

type StoredFileSchema = components['schemas']['StoredFile'];

const CONTENT_TYPES = { jpeg: 'image/jpeg', png: 'image/png', webp: 'image/webp' } as const;

export class StoredFileDto implements StoredFileSchema {
  file_id: string;
  content_type: StoredFileSchema['content_type'];
  width: number;
  height: number;
  size: number;
  expires_at: string;

  static of(file: StoredFileRow): StoredFileDto {
    return {
      file_id: file.id,
      content_type: CONTENT_TYPES[file.format],
      width: file.width,
      height: file.height,
      size: file.bytes,
      expires_at: file.expiresAt.toISOString(),
    };
  }
}
