import { randomUUID } from 'node:crypto';
import {
  copyFile,
  mkdir,
  open,
  opendir,
  readdir,
  readFile,
  rename,
  rm,
  stat,
  unlink,
  writeFile,
} from 'node:fs/promises';
import { dirname, join, relative, resolve, sep } from 'node:path';
import type { Readable } from 'node:stream';

/**
 * Where the service keeps files, by key (`{id}-clothes`, `{id}/preview.webp`). Narrow on purpose, so an
 * S3-compatible store (S3ObjectStore) stands in for the local disk.
 */
export abstract class ObjectStore {
  /** Writes atomically: a reader sees the whole old object, the whole new one, or nothing. */
  abstract put(key: string, data: Buffer): Promise<void>;
  /** Moves a local file (an upload's temporary file) into the store. */
  abstract putFile(key: string, sourcePath: string): Promise<void>;
  abstract get(key: string): Promise<Buffer>;
  /**
   * The object, opened: undefined when there is none now; once opened, it is read whole even if it is removed
   * meanwhile, so an answer that promised its size keeps the promise.
   */
  abstract open(key: string): Promise<{ stream: Readable; size: number } | undefined>;
  /**
   * A URL the store itself serves the object at for `seconds`, with `Cache-Control: cacheControl`; undefined for a
   * store that serves nothing itself (the local disk).
   */
  abstract presignedGet(key: string, seconds: number, cacheControl: string): Promise<string | undefined>;
  /** Removes these objects; one that is not there is no error. */
  abstract delete(keys: readonly string[]): Promise<void>;
  /** Removes every object whose key starts with `prefix/`. */
  abstract deleteFolder(prefix: string): Promise<void>;
  /** Every object in the store, with when it was written. */
  abstract list(): AsyncIterable<StoredObject>;
  /**
   * Every folder (the first segment of keys like `{id}/preview.webp`), with when anything in it was last written,
   * writes in progress included; objects outside a folder are left out.
   */
  abstract folders(): AsyncIterable<StoredObject>;
}

export interface StoredObject {
  key: string;
  writtenAt: Date;
}

/**
 * People's photos and what was made of them: readable by the service's own user alone. Other accounts on the host
 * cannot read a file, nor list a folder's names (a result folder's name is its unguessable media path).
 */
export const PRIVATE_FILE_MODE = 0o600;
export const PRIVATE_FOLDER_MODE = 0o700;

const SAFE_KEY = /^[A-Za-z0-9_-]+(?:\/[A-Za-z0-9_.-]+)*$/;

/** Keys come from our own ids, but a key is still never allowed to climb out of its store. */
export function assertSafeKey(key: string): void {
  if (!SAFE_KEY.test(key) || key.split('/').includes('..')) {
    throw new Error(`invalid object key: ${JSON.stringify(key)}`);
  }
}

export class LocalObjectStore extends ObjectStore {
  constructor(private readonly root: string) {
    super();
  }

  private pathOf(key: string): string {
    assertSafeKey(key);
    const path = resolve(this.root, key);
    if (!path.startsWith(this.root + sep)) throw new Error(`invalid object key: ${JSON.stringify(key)}`);
    return path;
  }

  private async temporaryPathFor(path: string): Promise<string> {
    await mkdir(dirname(path), { recursive: true, mode: PRIVATE_FOLDER_MODE });
    return join(dirname(path), `.${randomUUID()}.tmp`);
  }

  async put(key: string, data: Buffer): Promise<void> {
    const path = this.pathOf(key);
    const temporary = await this.temporaryPathFor(path);
    try {
      await writeFile(temporary, data, { mode: PRIVATE_FILE_MODE });
      await rename(temporary, path);
    } catch (error) {
      await rm(temporary, { force: true });
      throw error;
    }
  }

  async putFile(key: string, sourcePath: string): Promise<void> {
    const path = this.pathOf(key);
    try {
      // The store's folder is made by the first file only: later ones go straight in. The file keeps its mode: an
      // upload's temporary file is private from its creation.
      await rename(sourcePath, path).catch(async (error: NodeJS.ErrnoException) => {
        if (error.code !== 'ENOENT') throw error;
        await mkdir(dirname(path), { recursive: true, mode: PRIVATE_FOLDER_MODE });
        await rename(sourcePath, path);
      });
    } catch (error) {
      // Uploads may sit on another file system than the store: copy, then swap in atomically.
      if ((error as NodeJS.ErrnoException).code !== 'EXDEV') throw error;
      const temporary = await this.temporaryPathFor(path);
      await copyFile(sourcePath, temporary);
      await rename(temporary, path);
      await unlink(sourcePath);
    }
  }

  get(key: string): Promise<Buffer> {
    return readFile(this.pathOf(key));
  }

  async open(key: string): Promise<{ stream: Readable; size: number } | undefined> {
    // The size is the open file's: a file removed (unlinked) after this is still read whole through the handle, where
    // a stat and then a stream opened by path would find nothing to read and cut the answer short.
    const handle = await open(this.pathOf(key), 'r').catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return undefined;
      throw error;
    });
    if (!handle) return undefined;
    try {
      const info = await handle.stat();
      if (!info.isFile()) {
        await handle.close();
        return undefined;
      }
      return { stream: handle.createReadStream(), size: info.size };
    } catch (error) {
      await handle.close();
      throw error;
    }
  }

  /** Files on disk have no URL of their own: the /media route sends them. */
  presignedGet(): Promise<undefined> {
    return Promise.resolve(undefined);
  }

  async delete(keys: readonly string[]): Promise<void> {
    await Promise.all(keys.map((key) => rm(this.pathOf(key), { force: true })));
  }

  async deleteFolder(prefix: string): Promise<void> {
    await rm(this.pathOf(prefix), { recursive: true, force: true });
  }

  async *list(): AsyncIterable<StoredObject> {
    const entries = await readdir(this.root, { recursive: true, withFileTypes: true }).catch(
      (error: NodeJS.ErrnoException) => {
        // Made by the first object put: no folder, no objects.
        if (error.code === 'ENOENT') return [];
        throw error;
      },
    );
    for (const entry of entries) {
      // A name starting with a dot is a write in progress (`put`'s temporary file), not an object.
      if (!entry.isFile() || entry.name.startsWith('.')) continue;
      const path = join(entry.parentPath, entry.name);
      const info = await stat(path).catch(() => undefined);
      // Removed since the folder was read.
      if (!info) continue;
      yield { key: relative(this.root, path).split(sep).join('/'), writtenAt: info.mtime };
    }
  }

  async *folders(): AsyncIterable<StoredObject> {
    const root = await opendir(this.root).catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return undefined;
      throw error;
    });
    if (!root) return;
    // Read as it goes (not all names at once), one stat per folder: a folder's time changes with every file created,
    // renamed or removed in it, temporary files of writes in progress included.
    for await (const entry of root) {
      if (!entry.isDirectory()) continue;
      const info = await stat(join(this.root, entry.name)).catch(() => undefined);
      if (info) yield { key: entry.name, writtenAt: info.mtime };
    }
  }
}
