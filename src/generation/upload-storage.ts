import { createHash, type Hash, randomUUID } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { type FileHandle, open, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { Request } from 'express';
import type { StorageEngine } from 'multer';
import { PRIVATE_FILE_MODE, PRIVATE_FOLDER_MODE } from '../media/object-store.js';

/**
 * How much of each file is kept in memory to read its header from. A JPEG's or PNG's header ends within
 * it unless the file carries unusually large metadata (a camera's thumbnail, say); then the file is read.
 */
const HEAD_BYTES = 64 * 1024;
const TAIL_BYTES = 64;
/** Enough spare head buffers for the uploads of a busy moment; more are made when needed. */
const SPARE_HEADS = 64;

/**
 * Buffers for file heads, used again and again. A new one per file would be memory outside V8's heap,
 * which V8 counts toward its next full collection: at a few hundred uploads a second, one every moment.
 */
const spareHeads: Buffer[] = [];

/** What a file part's bytes said on their way to disk: enough to check its format without reading it back. */
export class Probe {
  private headBuffer: Buffer | undefined;
  private headLength = 0;
  tail: Buffer = Buffer.alloc(0);

  constructor(readonly hash: Hash | undefined) {}

  /** The file's first bytes, up to HEAD_BYTES (all of it, when it is no longer); valid until `release()`. */
  get head(): Buffer {
    return this.headBuffer?.subarray(0, this.headLength) ?? Buffer.alloc(0);
  }

  see(chunk: Buffer): void {
    if (this.headLength < HEAD_BYTES) {
      this.headBuffer ??= spareHeads.pop() ?? Buffer.allocUnsafeSlow(HEAD_BYTES);
      this.headLength += chunk.copy(this.headBuffer, this.headLength, 0, HEAD_BYTES - this.headLength);
    }
    this.tail =
      chunk.length >= TAIL_BYTES
        ? chunk.subarray(chunk.length - TAIL_BYTES)
        : Buffer.concat([this.tail, chunk]).subarray(-TAIL_BYTES);
    this.hash?.update(chunk);
  }

  /** Hands the head's buffer on to a later upload; a probe that is never released just leaves it to the GC. */
  release(): void {
    if (this.headBuffer && spareHeads.length < SPARE_HEADS) spareHeads.push(this.headBuffer);
    this.headBuffer = undefined;
    this.headLength = 0;
  }
}

/**
 * Bytes of a file part held in memory before they are written. Each write is handed to libuv's thread
 * pool, and on a virtual machine waking one of its threads costs more than copying a few hundred KB into
 * the page cache: a photo is written in one write instead of one per read from the network.
 */
const WRITE_BATCH_BYTES = 256 * 1024;

export type ProbedFile = Express.Multer.File & { probe: Probe };

/** This machine failed to store an upload (a full disk, say): the service's failure, not the client's. */
export class UploadStorageError extends Error {
  constructor(cause: unknown) {
    super(`an upload could not be stored: ${(cause as Error).message}`, { cause });
  }
}

type HandleFileCallback = (error?: unknown, info?: Partial<Express.Multer.File>) => void;

/**
 * multer storage for job uploads: each file part to a temporary file of its own, seen by a probe on its
 * way there, so its format and header are known without reading it back. A part that breaks off (the
 * client went away, the form was cut short) leaves no file.
 */
export class ProbingTemporaryFiles implements StorageEngine {
  /** The files still being written, so that multer can have one removed while it is. */
  private readonly writing = new WeakMap<Express.Multer.File, BatchedFile>();

  constructor(private readonly directory: string) {
    mkdirSync(directory, { recursive: true, mode: PRIVATE_FOLDER_MODE });
  }

  _handleFile(request: Request, file: Express.Multer.File, callback: HandleFileCallback): void {
    const { stream } = file;
    if (stream.destroyed) return callback(new Error('the file part was gone before it could be stored'));
    const probe = new Probe(request.headers['idempotency-key'] === undefined ? undefined : createHash('sha256'));
    (file as ProbedFile).probe = probe;
    const target = new BatchedFile(join(this.directory, randomUUID()));
    // Known from the start: when the request fails, multer removes the files of the parts in progress.
    file.path = target.path;
    this.writing.set(file, target);
    let failed = false;
    const settle = (error: unknown, info?: Partial<Express.Multer.File>) => {
      this.writing.delete(file);
      callback(error, info);
    };
    const fail = (error: unknown) => {
      if (failed) return;
      failed = true;
      // The rest of the part is read and dropped; multer stops reading the request itself.
      stream.resume();
      void target.discard().finally(() => settle(error));
    };

    stream.on('data', (chunk: Buffer) => {
      if (failed) return;
      probe.see(chunk);
      if (!target.add(chunk)) return;
      stream.pause();
      target.flush().then(
        () => stream.resume(),
        (error) => fail(new UploadStorageError(error)),
      );
    });
    stream.once('end', () => {
      target.finish().then(
        () => {
          if (!failed) settle(undefined, { path: target.path, size: target.size });
        },
        (error) => fail(new UploadStorageError(error)),
      );
    });
    stream.once('error', fail);
    stream.once('close', () => {
      if (!stream.readableEnded) fail(new Error('the file part ended before its end'));
    });
  }

  _removeFile(_request: Request, file: Express.Multer.File, callback: (error: Error | null) => void): void {
    const removed = this.writing.get(file)?.discard() ?? rm(file.path, { force: true });
    removed.then(() => callback(null), callback);
  }
}

/** A new file written in batches; its operations run one after another. */
class BatchedFile {
  private readonly opened: Promise<FileHandle>;
  private held: Buffer[] = [];
  private heldBytes = 0;
  private queue: Promise<void> = Promise.resolve();
  size = 0;

  constructor(readonly path: string) {
    // Opened at once: creating the file overlaps with receiving its first bytes.
    this.opened = open(path, 'wx', PRIVATE_FILE_MODE);
    // A failure to open surfaces at the first write, or is moot when the part is dropped first.
    this.opened.catch(() => {});
  }

  /** Holds the chunk; true when enough is held to be written now. */
  add(chunk: Buffer): boolean {
    this.held.push(chunk);
    this.heldBytes += chunk.length;
    this.size += chunk.length;
    return this.heldBytes >= WRITE_BATCH_BYTES;
  }

  flush(): Promise<void> {
    const chunks = this.held;
    const bytes = this.heldBytes;
    this.held = [];
    this.heldBytes = 0;
    return this.enqueue(async () => {
      if (bytes === 0) return;
      const { bytesWritten } = await (await this.opened).writev(chunks);
      if (bytesWritten !== bytes) throw new Error(`short write to ${this.path}: ${bytesWritten} of ${bytes} bytes`);
    });
  }

  async finish(): Promise<void> {
    await this.flush();
    await this.enqueue(async () => (await this.opened).close());
  }

  /** Closes and removes the file, once whatever is in progress has settled. */
  async discard(): Promise<void> {
    this.held = [];
    await this.queue.catch(() => {});
    const handle = await this.opened.catch(() => undefined);
    if (!handle) return;
    await handle.close().catch(() => {});
    await rm(this.path, { force: true });
  }

  private enqueue(step: () => Promise<void>): Promise<void> {
    const next = this.queue.then(step);
    // A failed step fails its caller; later steps (a discard) still run.
    this.queue = next.catch(() => {});
    return next;
  }
}
