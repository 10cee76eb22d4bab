import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import type { AppConfig } from '../../src/config/config.js';
import { DomainError } from '../../src/common/problem.js';
import { UrlInputs } from '../../src/generation/url-inputs.js';
import { ImageServer } from '../support/image-server.js';

const PHOTO = 'test/fixtures/photos/cup-on-white-cropped.jpg';

/** UrlInputs against a loopback image server: which URLs it reaches, and what it keeps of those it refuses. */
describe('UrlInputs', () => {
  let images: ImageServer;
  let folder: string;
  let photo: Buffer;

  const sutWith = (settings: Partial<AppConfig>) =>
    new UrlInputs({
      webhookAllowHttp: true,
      webhookAllowPrivateNetworks: true,
      urlFetchTimeoutMs: 5000,
      uploadMaxFileBytes: 1024 * 1024,
      uploadTmpDir: folder,
      ...settings,
    } as AppConfig);

  /** The problem a refused fetch is, as the client will read it. */
  const refusal = (fetching: Promise<unknown>) =>
    fetching.then(
      () => {
        throw new Error('the fetch was not refused');
      },
      (error: unknown) => {
        if (!(error instanceof DomainError)) throw error;
        return { code: error.code, errors: error.options.errors };
      },
    );

  beforeAll(async () => {
    images = await ImageServer.start();
    photo = await readFile(PHOTO);
    images.route('/photo.jpg', { kind: 'bytes', data: photo, contentType: 'image/jpeg' });
    images.route('/to-ftp', { kind: 'redirect', to: 'ftp://127.0.0.1/photo.jpg' });
    images.route('/to-photo', { kind: 'redirect', to: '/photo.jpg' });
  });

  beforeEach(async () => {
    folder = await mkdtemp(join(tmpdir(), 'url-inputs-'));
  });

  afterEach(() => rm(folder, { recursive: true, force: true }));
  afterAll(() => images.stop());

  it('writes the body to a file of its own, seen by a probe on the way', async () => {
    const sut = sutWith({});

    const fetched = await sut.fetch('image', images.url('/to-photo'), { hash: true });

    expect(await readFile(fetched.path)).toEqual(photo);
    expect(fetched.size).toBe(photo.length);
    expect(fetched.probe.head.subarray(0, 3)).toEqual(photo.subarray(0, 3));
    expect(fetched.probe.hash).toBeDefined();
  });

  it('refuses plain http unless WEBHOOK_ALLOW_HTTP, before connecting', async () => {
    const sut = sutWith({ webhookAllowHttp: false });
    const before = images.requests.get('/photo.jpg') ?? 0;

    const problem = await refusal(sut.fetch('image', images.url('/photo.jpg'), { hash: false }));

    expect(problem).toEqual({
      code: 'input_fetch_failed',
      errors: [{ field: 'image', message: 'its URL must be an https URL' }],
    });
    expect(images.requests.get('/photo.jpg') ?? 0).toBe(before);
    expect(await readdir(folder)).toEqual([]);
  });

  it('judges a redirect target by the same rules as the URL', async () => {
    const sut = sutWith({});

    const problem = await refusal(sut.fetch('person', images.url('/to-ftp'), { hash: false }));

    expect(problem.errors).toEqual([{ field: 'person', message: "a redirect's target must be an https or http URL" }]);
    expect(await readdir(folder)).toEqual([]);
  });

  it('refuses a host name that resolves to a private address, on the address it would connect to', async () => {
    const sut = sutWith({ webhookAllowPrivateNetworks: false });

    // This machine's name resolves to a loopback address: the URL itself names no private address.
    const problem = await refusal(sut.fetch('image', images.url('/photo.jpg', hostname()), { hash: false }));

    expect(problem.code).toBe('input_fetch_failed');
    expect(problem.errors?.[0].message).toMatch(/refused: .* resolves to/);
  });
});
