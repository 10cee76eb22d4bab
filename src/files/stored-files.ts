import { randomBytes, randomUUID } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { Inject, Injectable } from '@nestjs/common';
import type { ImageFormat } from '../common/image-format.js';
import { AppConfig } from '../config/config.js';
import { INPUT_STORE } from '../media/media.js';
import { type ObjectStore, PRIVATE_FILE_MODE } from '../media/object-store.js';
import { StoredFileRepository, type StoredFileRow } from './stored-file.repository.js';

/** An image that passed an upload's checks, in a temporary file of this process. */
export interface CheckedImage {
  path: string;
  format: ImageFormat;
  width: number;
  height: number;
  bytes: number;
}

/** `file_` and 128 random bits in hex: unguessable, and a key the input stores take as it is. */
const FILE_ID = /^file_[0-9a-f]{32}$/;

/** Whether a stored object's key is a stored file's (the input store also holds jobs' inputs). */
export function isFileKey(key: string): boolean {
  return FILE_ID.test(key);
}

/**
 * Users' stored files: the bytes in the private input store under the file's id, the row in `files`. Bytes are written
 * before the row and removed after it, so a crash leaves bytes no row names (the sweep removes those), never a row
 * naming nothing.
 */
@Injectable()
export class StoredFiles {
  constructor(
    private readonly config: AppConfig,
    private readonly files: StoredFileRepository,
    @Inject(INPUT_STORE) private readonly inputs: ObjectStore,
  ) {}

  /** Moves a checked upload into the store as the user's file, kept FILE_TTL. */
  async store(userId: string, image: CheckedImage): Promise<StoredFileRow> {
    const id = `file_${randomBytes(16).toString('hex')}`;
    await this.inputs.putFile(id, image.path);
    try {
      const { format, width, height, bytes } = image;
      return await this.files.insert({ id, userId, key: id, format, width, height, bytes }, this.config.fileTtlMs);
    } catch (error) {
      await this.inputs.delete([id]).catch(() => {});
      throw error;
    }
  }

  find(userId: string, id: string): Promise<StoredFileRow | undefined> {
    return FILE_ID.test(id) ? this.files.findOwn(userId, id) : Promise.resolve(undefined);
  }

  /** Removes the user's file; false when they have no such file (any more). */
  async remove(userId: string, id: string): Promise<boolean> {
    if (!FILE_ID.test(id)) return false;
    const key = await this.files.deleteOwn(userId, id);
    if (key === undefined) return false;
    // Should this fail, the bytes are left to the sweep: no row names them any more.
    await this.inputs.delete([key]).catch(() => {});
    return true;
  }

  /**
   * A copy of the user's file in a temporary file of its own, for a job to take as its input: the job then holds its
   * own bytes, whatever becomes of the file. Undefined when the user has no such file, or it went meanwhile.
   */
  async copyOut(userId: string, id: string): Promise<CheckedImage | undefined> {
    const file = await this.find(userId, id);
    if (!file) return undefined;
    const object = await this.inputs.open(file.key);
    if (!object) return undefined;
    const path = join(this.config.uploadTmpDir, randomUUID());
    try {
      await pipeline(object.stream, createWriteStream(path, { flags: 'wx', mode: PRIVATE_FILE_MODE }));
    } catch (error) {
      await rm(path, { force: true });
      throw error;
    }
    return { path, format: file.format, width: file.width, height: file.height, bytes: file.bytes };
  }

  /** Removes up to `limit` expired files (or, with `userId`, that user's files); resolves how many went. */
  async removeSome(limit: number, userId?: string): Promise<number> {
    const keys = await this.files.deleteSome(limit, userId);
    await this.inputs.delete(keys);
    return keys.length;
  }

  /** Removes stored files' bytes written before `cutoff` that no row names (a store whose row failed, say). */
  async removeStray(cutoff: number): Promise<number> {
    const old: string[] = [];
    for await (const { key, writtenAt } of this.inputs.list()) {
      if (isFileKey(key) && writtenAt.getTime() <= cutoff) old.push(key);
    }
    if (old.length === 0) return 0;
    const named = await this.files.keysAmong(old);
    const stray = old.filter((key) => !named.has(key));
    await this.inputs.delete(stray);
    return stray.length;
  }
}
