import { createReadStream } from 'node:fs';
import { stat, unlink } from 'node:fs/promises';
import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import {
  DeleteObjectsCommand,
  GetObjectCommand,
  ListObjectsV2Command,
  NoSuchKey,
  type _Object,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { getSignedUrl } from '@aws-sdk/s3-request-presigner';
import type { StorageSetting } from '../config/config.js';
import { outputContentType } from './media.js';
import { assertSafeKey, ObjectStore, type StoredObject } from './object-store.js';

/** S3 lists at most 1000 keys a page and DeleteObjects takes at most 1000 keys a call. */
const MAX_KEYS_PER_CALL = 1000;

export function createS3Client(setting: Extract<StorageSetting, { kind: 's3' }>): S3Client {
  return new S3Client({
    endpoint: setting.endpoint,
    region: setting.region,
    forcePathStyle: setting.forcePathStyle,
    credentials: setting.credentials,
    // S3-compatible servers differ in their support for the checksum trailers the SDK adds by default (aws-chunked
    // uploads); asking for checksums only where S3 requires them (DeleteObjects) works with all of them.
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    // A storage outage fails requests and jobs within seconds instead of holding them; the request timeout is the
    // longest a socket may stay idle, which a download to a slow client may need.
    requestHandler: { connectionTimeout: 3000, requestTimeout: 30_000 },
  });
}

export interface S3ObjectStoreOptions {
  bucket: string;
  /** Where this store's keys live in the bucket, e.g. `media/`: the media and the inputs share one bucket. */
  prefix: string;
  /** Stored on every object, for a CDN or the bucket itself serving them straight to clients. */
  cacheControl?: string;
  /** Keys listed and deleted per call; smaller only to cross page boundaries with few objects (tests). */
  pageSize?: number;
}

/**
 * The object store on an S3-compatible bucket. A PUT replaces an object whole, so readers never see part of
 * one; an output carries its Content-Type, so the bucket can serve it as the /media route would.
 */
export class S3ObjectStore extends ObjectStore {
  private readonly pageSize: number;

  constructor(
    private readonly client: S3Client,
    private readonly options: S3ObjectStoreOptions,
  ) {
    super();
    this.pageSize = Math.min(options.pageSize ?? MAX_KEYS_PER_CALL, MAX_KEYS_PER_CALL);
  }

  private objectKey(key: string): string {
    assertSafeKey(key);
    return this.options.prefix + key;
  }

  private putCommand(key: string, body: Buffer | Readable, contentLength: number): PutObjectCommand {
    return new PutObjectCommand({
      Bucket: this.options.bucket,
      Key: this.objectKey(key),
      Body: body,
      ContentLength: contentLength,
      ContentType: outputContentType(posix.basename(key)),
      CacheControl: this.options.cacheControl,
    });
  }

  async put(key: string, data: Buffer): Promise<void> {
    await this.client.send(this.putCommand(key, data, data.length));
  }

  /** Streams the file up (an upload is never held in memory whole), then removes it: a move, as on disk. */
  async putFile(key: string, sourcePath: string): Promise<void> {
    const { size } = await stat(sourcePath);
    await this.client.send(this.putCommand(key, createReadStream(sourcePath), size));
    await unlink(sourcePath);
  }

  async get(key: string): Promise<Buffer> {
    const object = await this.client.send(
      new GetObjectCommand({ Bucket: this.options.bucket, Key: this.objectKey(key) }),
    );
    return Buffer.from(await object.Body!.transformToByteArray());
  }

  async open(key: string): Promise<{ stream: Readable; size: number } | undefined> {
    try {
      const object = await this.client.send(
        new GetObjectCommand({ Bucket: this.options.bucket, Key: this.objectKey(key) }),
      );
      return { stream: object.Body as Readable, size: object.ContentLength ?? 0 };
    } catch (error) {
      if (error instanceof NoSuchKey) return undefined;
      throw error;
    }
  }

  /** A presigned GET, whose answer carries `cacheControl` whatever the object was stored with. */
  presignedGet(key: string, seconds: number, cacheControl: string): Promise<string> {
    const command = new GetObjectCommand({
      Bucket: this.options.bucket,
      Key: this.objectKey(key),
      ResponseCacheControl: cacheControl,
    });
    return getSignedUrl(this.client, command, { expiresIn: seconds });
  }

  async delete(keys: readonly string[]): Promise<void> {
    const objectKeys = keys.map((key) => this.objectKey(key));
    for (let start = 0; start < objectKeys.length; start += this.pageSize) {
      await this.deleteObjects(objectKeys.slice(start, start + this.pageSize), 'objects');
    }
  }

  async deleteFolder(prefix: string): Promise<void> {
    const folder = `${this.objectKey(prefix)}/`;
    for await (const objects of this.pages(folder)) {
      await this.deleteObjects(
        objects.map((object) => object.Key!),
        `objects under ${folder}`,
      );
    }
  }

  async *list(): AsyncIterable<StoredObject> {
    const { prefix } = this.options;
    for await (const objects of this.pages(prefix)) {
      for (const { Key, LastModified } of objects) yield { key: Key!.slice(prefix.length), writtenAt: LastModified! };
    }
  }

  async *folders(): AsyncIterable<StoredObject> {
    const { prefix } = this.options;
    // Keys come in order, so a folder's objects come one after another.
    let folder: StoredObject | undefined;
    for await (const objects of this.pages(prefix)) {
      for (const { Key, LastModified } of objects) {
        const [name, ...rest] = Key!.slice(prefix.length).split('/');
        if (rest.length === 0) continue;
        if (folder?.key !== name) {
          if (folder) yield folder;
          folder = { key: name, writtenAt: LastModified! };
        } else if (LastModified! > folder.writtenAt) {
          folder.writtenAt = LastModified!;
        }
      }
    }
    if (folder) yield folder;
  }

  /** The objects whose keys start with `prefix` (already prefixed), a page at a time. */
  private async *pages(prefix: string): AsyncIterable<_Object[]> {
    let continuationToken: string | undefined;
    do {
      const page = await this.client.send(
        new ListObjectsV2Command({
          Bucket: this.options.bucket,
          Prefix: prefix,
          MaxKeys: this.pageSize,
          ContinuationToken: continuationToken,
        }),
      );
      yield page.Contents ?? [];
      continuationToken = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (continuationToken);
  }

  /** At most one call's worth of keys (already prefixed); `what` names them in the error. */
  private async deleteObjects(objectKeys: string[], what: string): Promise<void> {
    if (objectKeys.length === 0) return;
    const result = await this.client.send(
      new DeleteObjectsCommand({
        Bucket: this.options.bucket,
        Delete: { Objects: objectKeys.map((Key) => ({ Key })), Quiet: true },
      }),
    );
    const failed = result.Errors ?? [];
    if (failed.length > 0) {
      throw new Error(`${failed.length} ${what} were not deleted: ${failed[0].Code} ${failed[0].Message}`);
    }
  }
}
