import type { OnApplicationShutdown } from '@nestjs/common';
import type { S3Client } from '@aws-sdk/client-s3';
import type { AppConfig } from '../config/config.js';
import { STORED_MEDIA_CACHE_CONTROL, MEDIA_PREFIX } from './media.js';
import { LocalObjectStore, type ObjectStore } from './object-store.js';
import { createS3Client, S3ObjectStore } from './s3-object-store.js';

/** Inputs are never served: on S3 they sit outside the `media/` prefix a bucket policy may make public. */
const INPUT_PREFIX = 'inputs/';

/** The media and input stores STORAGE picks: two folders on disk, or two prefixes of one S3 bucket. */
export class MediaStorage implements OnApplicationShutdown {
  private constructor(
    readonly media: ObjectStore,
    readonly inputs: ObjectStore,
    private readonly s3?: S3Client,
  ) {}

  static from(config: AppConfig): MediaStorage {
    const storage = config.storage;
    if (storage.kind === 'local') {
      return new MediaStorage(new LocalObjectStore(config.mediaRoot), new LocalObjectStore(config.inputRoot));
    }
    const client = createS3Client(storage);
    return new MediaStorage(
      new S3ObjectStore(client, {
        bucket: storage.bucket,
        prefix: MEDIA_PREFIX,
        cacheControl: STORED_MEDIA_CACHE_CONTROL,
      }),
      new S3ObjectStore(client, { bucket: storage.bucket, prefix: INPUT_PREFIX }),
      client,
    );
  }

  onApplicationShutdown(): void {
    this.s3?.destroy();
  }
}
