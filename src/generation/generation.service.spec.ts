import { randomUUID } from 'node:crypto';
import { mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Request, Response } from 'express';
import { BUILT_IN, findTool } from '../catalog/catalog.js';
import { ServiceUnavailableError } from '../common/unavailable.js';
import type { AppConfig } from '../config/config.js';
import type { LiveRouting } from '../config/live-routing.js';
import type { JobLifecycle } from '../jobs/job-lifecycle.js';
import type { JobWaits } from '../jobs/job-waits.js';
import { MediaUrls } from '../media/media-urls.js';
import { LocalObjectStore } from '../media/object-store.js';
import type { FairShare } from '../users/fair-share.js';
import type { UserRepository } from '../users/user.repository.js';
import { UserLimits } from '../users/user-limits.js';
import { GenerationService } from './generation.service.js';
import type { JsonJobs } from './json-jobs.js';
import type { IdempotencyKeys } from './idempotency.js';
import type { CreationRateLimit } from './limits.js';
import { UploadParser, type ValidUpload } from './upload.js';

describe('GenerationService', () => {
  let dir: string;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'generation-service-'));
  });

  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('leaves no photo behind when the database fails as the job is recorded', async () => {
    const uploadTmpDir = join(dir, 'tmp');
    const inputRoot = join(dir, 'inputs');
    const uploads = new UploadParser({ uploadTmpDir } as AppConfig, { current: { catalog: BUILT_IN } } as LiveRouting);
    const photo = join(uploadTmpDir, randomUUID());
    await writeFile(photo, 'a person');
    const upload: ValidUpload = {
      tool: findTool('default')!,
      generationType: 'default',
      images: { image: { path: photo, format: 'jpeg', width: 640, height: 960, bytes: 8 } },
      texts: {},
      webhookUrl: null,
      webhookEvents: null,
      seed: undefined,
      numOutputs: 1,
    };
    uploads.parse = () => Promise.resolve(upload);
    const databaseDown = new ServiceUnavailableError('database');
    const users = { limitsOf: () => Promise.reject(databaseDown) } as unknown as UserRepository;
    const rateLimit = {
      check: () => Promise.resolve(),
      take: () => Promise.resolve('creation'),
      refund: () => Promise.resolve(),
    } as unknown as CreationRateLimit;
    const sut = new GenerationService(
      new LocalObjectStore(inputRoot),
      uploads,
      { accept: () => Promise.resolve(true) } as unknown as JobLifecycle,
      {} as JobWaits,
      {} as IdempotencyKeys,
      rateLimit,
      new UserLimits(users, { limitMaxPending: 10, limitCreationsPerMinute: 60 } as AppConfig),
      { take: () => Promise.resolve(() => {}) } as unknown as FairShare,
      {} as JsonJobs,
      new MediaUrls('k'.repeat(32), undefined, 3_600_000, 'http://localhost:3000'),
    );
    const request = { headersDistinct: {}, is: () => false } as unknown as Request;

    await expect(sut.create('user-1', request, {} as Response)).rejects.toBe(databaseDown);

    expect(await readdir(uploadTmpDir)).toEqual([]);
    expect(await readdir(inputRoot).catch(() => [])).toEqual([]);
  });
});
