import { mkdir, mkdtemp, rename, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import sharp from 'sharp';
import { Client, createJob, postJob, waitForFinal } from '../../support/client.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { type FakeCog, type FakeCogAnswer, sha256, startFakeCog } from '../../support/fake-cog.js';
import { FAST_TIMINGS, uniqueImage } from '../../support/harness.js';
import { makePerson } from '../../support/jobs.js';
import { createUserWithKey, freePort, type RunningService, startService } from '../../support/service.js';

/** The accessory model's inputs, as its Cog container would publish them. */
const HAT_SCHEMA = {
  properties: {
    person_img: { type: 'string' as const, format: 'uri' },
    item_img: { type: 'string' as const, format: 'uri' },
    style: { type: 'string' as const },
  },
};

const ENGINES = (url: string) => `
engines:
  hats:
    kind: cog
    url: ${url}
    concurrency: 1
`;
const HAT_TOOL = `
tools:
  fashion_accessories:
    group_tool: fashion
    title: Accessory try-on
    generation_types:
      hat:
        title: Hat
        description: Places a hat on the person's head.
        default: true
        inputs:
          person: { kind: image, required: true, description: 'Photo of one person, head and shoulders.' }
          accessory: { kind: image, required: true, description: 'The hat alone, any background.' }
          prompt: { kind: text, required: false, max_length: 20, description: Style hints. }
`;
const HAT_ROUTE = `
routes:
  fashion_accessories/hat:
    engine: hats
    inputs: { person: person_img, accessory: item_img, prompt: style }
`;
/** A change that breaks the file: a route to an engine it does not have. */
const BROKEN_ROUTE = HAT_ROUTE.replace('engine: hats', 'engine: hatz');

/**
 * A folder laid out as Kubernetes mounts a ConfigMap: `engines.yaml -> ..data/engines.yaml`, `..data -> ..<version>`.
 * An update writes a new version folder and swaps `..data` in one rename.
 */
class ConfigMapFolder {
  private version = 0;

  private constructor(readonly folder: string) {}

  static async create(yaml: string): Promise<ConfigMapFolder> {
    const folder = new ConfigMapFolder(await mkdtemp(join(tmpdir(), 'configmap-')));
    await folder.publish(yaml);
    await symlink('..data/engines.yaml', join(folder.folder, 'engines.yaml'));
    return folder;
  }

  get file(): string {
    return join(this.folder, 'engines.yaml');
  }

  async publish(yaml: string): Promise<void> {
    this.version += 1;
    const name = `..2026_v${this.version}`;
    await mkdir(join(this.folder, name));
    await writeFile(join(this.folder, name, 'engines.yaml'), yaml);
    await symlink(name, join(this.folder, '..data_tmp'));
    await rename(join(this.folder, '..data_tmp'), join(this.folder, '..data'));
  }
}

/** The value of an unlabelled series on a process's /metrics. */
async function metric(port: number, name: string): Promise<number | undefined> {
  const text = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
  const line = text.split('\n').find((candidate) => candidate.startsWith(`${name} `));
  return line === undefined ? undefined : Number(line.split(' ')[1]);
}

/** Resolves once `check` holds, asking again as it would be asked by a person watching; rejects after 10 s. */
async function eventually(check: () => Promise<boolean>, what: string): Promise<void> {
  // The promise: a change is in use everywhere within 10 s.
  const deadline = Date.now() + 10_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not within 10 s: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe('tools by configuration, changed while the service runs', () => {
  let env: TestEnvironment;
  let fake: FakeCog;
  let config: ConfigMapFolder;
  let api: RunningService;
  let worker: RunningService;
  let apiMetrics: number;
  let workerMetrics: number;
  let key: string;
  let client: Client;
  let person: Buffer;
  /** What the fake does with the job whose accessory image has this sha256. */
  const plans = new Map<string, FakeCogAnswer>();

  const toolIds = async () => (await client.tools()).body.map((tool) => tool.tool);

  async function hatJob(answer: FakeCogAnswer = { kind: 'succeed' }): Promise<string> {
    const accessory = await uniqueImage();
    plans.set(sha256(accessory), answer);
    return createJob(api.baseUrl, key, {
      tool: 'fashion_accessories',
      person: { data: person, filename: 'person.jpg', contentType: 'image/jpeg' },
      accessory: { data: accessory, filename: 'hat.png', contentType: 'image/png' },
      prompt: 'felt, wide brim',
    });
  }

  beforeAll(async () => {
    person = await makePerson('jpeg');
    const result = await sharp({ create: { width: 96, height: 128, channels: 3, background: '#2a4' } })
      .png()
      .toBuffer();
    fake = await startFakeCog(
      (request) => plans.get(request.images.item_img ?? '') ?? { kind: 'succeed', image: result },
      { schema: HAT_SCHEMA },
    );
    env = await createTestEnvironment();
    config = await ConfigMapFolder.create(ENGINES(fake.url));
    [apiMetrics, workerMetrics] = [await freePort(), await freePort()];
    const common = { ...env.serviceEnv, ...FAST_TIMINGS, ENGINES_FILE: config.file };
    // Two processes, as deployed: each reads the file itself.
    api = await startService({ ...common, ROLE: 'api', METRICS_PORT: String(apiMetrics) });
    worker = await startService({
      ...common,
      ROLE: 'worker',
      METRICS_PORT: String(workerMetrics),
      WORKER_CONCURRENCY: '1',
    });
    key = await createUserWithKey(env.databaseUrl);
    client = new Client(api.baseUrl, key);
  }, 90_000);

  afterAll(async () => {
    await Promise.all([api?.stop(), worker?.stop()]);
    await fake?.close();
    await env?.dispose();
  });

  it('adds a tool under load (a ConfigMap update): no request answered 5xx, every job finished', async () => {
    expect(await toolIds()).not.toContain('fashion_accessories');
    const statuses: number[] = [];
    const jobs: string[] = [];
    let loading = true;
    const load = (async () => {
      while (loading) {
        const [tools, created] = await Promise.all([
          fetch(`${api.baseUrl}/generation/tools`, { headers: { Authorization: `Bearer ${key}` } }),
          postJob(api.baseUrl, key, {
            tool: 'default',
            image: { data: await uniqueImage(), filename: 'photo.png', contentType: 'image/png' },
          }),
        ]);
        statuses.push(tools.status, created.status);
        await tools.body?.cancel();
        if (created.status === 202) jobs.push(((await created.json()) as { history_item_id: string }).history_item_id);
        else await created.body?.cancel();
      }
    })();

    await config.publish(ENGINES(fake.url) + HAT_TOOL + HAT_ROUTE);
    await eventually(async () => (await toolIds()).includes('fashion_accessories'), 'the API lists the new tool');
    const id = await hatJob();
    loading = false;
    await load;

    expect(statuses.filter((status) => status >= 500)).toEqual([]);
    expect(jobs.length).toBeGreaterThan(0);
    for (const job of jobs) expect((await waitForFinal(api.baseUrl, key, job)).status).toBe('complete');
    expect(await waitForFinal(api.baseUrl, key, id)).toMatchObject({ status: 'complete', tool: 'fashion_accessories' });
    const [prediction] = fake.requests.filter((request) => request.images.item_img !== undefined);
    expect(prediction.texts).toEqual({ style: 'felt, wide brim' });
    expect(Object.keys(prediction.images).sort()).toEqual(['item_img', 'person_img']);
    // Both processes use the same file, and say so.
    await eventually(
      async () =>
        (await metric(workerMetrics, 'igs_config_generation')) === (await metric(apiMetrics, 'igs_config_generation')),
      'the worker uses the generation the API uses',
    );
    expect(await metric(apiMetrics, 'igs_config_generation')).toBeGreaterThan(0);
  }, 60_000);

  it("describes the configured tool's inputs as the file does, its text limit beside its kind", async () => {
    const { status, body } = await client.generationTypes('fashion_accessories');

    expect(status).toBe(200);
    expect(body).toEqual([
      {
        generation_type: 'hat',
        tool: 'fashion_accessories',
        title: 'Hat',
        description: "Places a hat on the person's head.",
        is_default: true,
        inputs: [
          { name: 'person', kind: 'image', required: true, description: 'Photo of one person, head and shoulders.' },
          { name: 'accessory', kind: 'image', required: true, description: 'The hat alone, any background.' },
          { name: 'prompt', kind: 'text', required: false, max_length: 20, description: 'Style hints.' },
        ],
      },
    ]);
  });

  it("checks a configured tool's job form as the file says: its inputs, its text limit", async () => {
    const tooLong = await postJob(api.baseUrl, key, {
      tool: 'fashion_accessories',
      person: { data: person, filename: 'person.jpg', contentType: 'image/jpeg' },
      accessory: { data: await uniqueImage(), filename: 'hat.png', contentType: 'image/png' },
      prompt: 'x'.repeat(21),
    });
    const missing = await postJob(api.baseUrl, key, {
      tool: 'fashion_accessories',
      person: { data: person, filename: 'person.jpg', contentType: 'image/jpeg' },
    });

    expect(tooLong.status).toBe(400);
    expect(await tooLong.json()).toMatchObject({
      code: 'validation_failed',
      errors: [{ field: 'prompt', message: 'at most 20 characters' }],
    });
    expect(missing.status).toBe(400);
    expect(await missing.json()).toMatchObject({
      errors: [{ field: 'accessory', message: 'required image is missing' }],
    });
  });

  it('refuses a bad change, logs its key path, counts it, and serves on with the last good file', async () => {
    const generation = await metric(apiMetrics, 'igs_config_generation');
    const failures = (await metric(apiMetrics, 'igs_config_reload_failures_total')) ?? 0;

    await config.publish(ENGINES(fake.url) + HAT_TOOL + BROKEN_ROUTE);
    await eventually(
      async () => (await metric(apiMetrics, 'igs_config_reload_failures_total')) === failures + 1,
      'the API counts the refused file',
    );
    await eventually(
      async () => ((await metric(workerMetrics, 'igs_config_reload_failures_total')) ?? 0) >= 1,
      'the worker counts the refused file',
    );

    // Its log line comes through a pipe, apart from the metric: waited for as well.
    await eventually(
      () =>
        Promise.resolve(
          api.output().includes('routes.fashion_accessories/hat.engine: there is no engine \\"hatz\\" under engines'),
        ),
      'the API to log the refused key path',
    );
    expect(await metric(apiMetrics, 'igs_config_generation')).toBe(generation);
    expect(await toolIds()).toContain('fashion_accessories');
    expect((await waitForFinal(api.baseUrl, key, await hatJob())).status).toBe('complete');
  }, 60_000);

  it('withdraws a tool: new jobs 422, its running job finishes, its queued one ends saying why, its history stays', async () => {
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    const running = await hatJob({ kind: 'succeed', until: held });
    await fake.waitFor((current) => current.inFlight().length === 1, 'the first hat job runs on the model');
    // WORKER_CONCURRENCY=1: this one stays queued while the first runs.
    const queued = await hatJob();

    // The file without the tool, and the built-in lengerie withdrawn.
    await config.publish(`${ENGINES(fake.url)}\ntools:\n  lengerie: { disabled: true }\n`);
    await eventually(
      async () => !(await toolIds()).includes('fashion_accessories'),
      'the API no longer lists the tool',
    );
    release();

    expect(await waitForFinal(api.baseUrl, key, running)).toMatchObject({ status: 'complete' });
    expect(await waitForFinal(api.baseUrl, key, queued)).toMatchObject({
      status: 'error',
      error: {
        code: 'engine_failed',
        message: 'The tool "fashion_accessories" (generation type "hat") was withdrawn before the job ran.',
      },
    });
    const refused = await postJob(api.baseUrl, key, {
      tool: 'fashion_accessories',
      person: { data: person, filename: 'person.jpg', contentType: 'image/jpeg' },
      accessory: { data: await uniqueImage(), filename: 'hat.png', contentType: 'image/png' },
    });
    expect(refused.status).toBe(422);
    expect(await refused.json()).toMatchObject({ code: 'unknown_tool' });
    expect(await toolIds()).not.toContain('lengerie');
    const lingerie = await postJob(api.baseUrl, key, {
      tool: 'lengerie',
      person: { data: person, filename: 'person.jpg', contentType: 'image/jpeg' },
      clothes: { data: await uniqueImage(), filename: 'clothes.png', contentType: 'image/png' },
    });
    expect(lingerie.status).toBe(422);
    expect(await lingerie.json()).toMatchObject({ code: 'unknown_tool' });
    const history = await client.list('generation_type=hat&limit=100');
    expect(history.status).toBe(200);
    expect(history.body.items.map((item) => item.history_item_id)).toEqual(expect.arrayContaining([running, queued]));
  }, 60_000);
});
