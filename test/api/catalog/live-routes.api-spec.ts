import { copyFile, mkdir, mkdtemp, rename, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client, createJob, waitForFinal } from '../../support/client.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { type FakeComfy, startFakeComfy } from '../../support/fake-comfyui.js';
import { expectCompleteWithOutputs, FAST_TIMINGS } from '../../support/harness.js';
import { makeImage } from '../../support/jobs.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';

const WORKFLOW = new URL('../../../docs/routing/workflows/img2img.json', import.meta.url);

/** A configured tool on a ComfyUI server: one photo and a style text, into the img2img workflow's nodes. */
const RESTYLE = (url: string) => `
engines:
  comfy:
    kind: comfyui
    url: ${url}
tools:
  restyle:
    group_tool: default
    title: Restyle
    generation_types:
      watercolour:
        title: Watercolour
        description: The photo as a watercolour painting.
        inputs:
          photo: { kind: image, required: true, description: Any photo. }
          style: { kind: text, required: true, max_length: 200, description: What the painting should look like. }
routes:
  restyle:
    engine: comfy
    workflow: workflows/img2img.json
    inputs:
      photo: { node: "2" }
      style: { node: "4", input: text }
    output: { node: "8" }
    seed: { node: "6", input: seed }
`;

/** Resolves once `check` holds, asking again as a person watching would; rejects after 10 s. */
async function eventually(check: () => Promise<boolean>, what: string): Promise<void> {
  // The promise: a change is in use everywhere within 10 s.
  const deadline = Date.now() + 10_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`not within 10 s: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

describe('routes and engines changed while the service runs', () => {
  let env: TestEnvironment;
  let fake: FakeComfy;
  let root: string;
  let sut: RunningService;
  let key: string;
  let client: Client;

  const titles = async () => new Map((await client.tools()).body.map((tool) => [tool.tool, tool.title]));

  beforeAll(async () => {
    env = await createTestEnvironment();
    fake = await startFakeComfy({ steps: 2, stepMs: 20 });
    // ENGINES_FILE is read through a link to a folder: `current -> a`. The folder watched is the one the link leads
    // to, so the link turned to another folder is seen only on SIGHUP.
    root = await mkdtemp(join(tmpdir(), 'live-routes-'));
    await mkdir(join(root, 'a'));
    await writeFile(join(root, 'a', 'engines.yaml'), 'tools:\n  fabric: { title: Fabric retexture }\n');
    await symlink('a', join(root, 'current'));
    sut = await startService({
      ...env.serviceEnv,
      ...FAST_TIMINGS,
      ROLE: 'all',
      ENGINES_FILE: join(root, 'current', 'engines.yaml'),
    });
    key = await createUserWithKey(env.databaseUrl);
    client = new Client(sut.baseUrl, key);
  }, 60_000);

  afterAll(async () => {
    await sut?.stop();
    await fake?.close();
    await env?.dispose();
  });

  it('takes a new model server, a new workflow and a configured tool on it, and runs its job there', async () => {
    await mkdir(join(root, 'a', 'workflows'));
    await copyFile(WORKFLOW, join(root, 'a', 'workflows', 'img2img.json'));
    await writeFile(join(root, 'a', 'engines.yaml'), RESTYLE(fake.url));
    await eventually(async () => (await titles()).get('restyle') === 'Restyle', 'the new tool is listed');

    const id = await createJob(sut.baseUrl, key, {
      tool: 'restyle',
      style: 'soft washes of blue',
      photo: { data: await makeImage(240, 200, 'png'), filename: 'photo.png', contentType: 'image/png' },
    });
    const item = await waitForFinal(sut.baseUrl, key, id);

    await expectCompleteWithOutputs(sut.baseUrl, item);
    expect(item).toMatchObject({ tool: 'restyle', generation_type: 'watercolour' });
    const [{ prompt }] = fake.prompts.filter((sent) => String(sent.prompt['2'].inputs.image).startsWith(id));
    expect(prompt['4'].inputs.text).toBe('soft washes of blue');
  }, 60_000);

  it('reads the file again on SIGHUP: a change its watch cannot see (the link turned to another folder)', async () => {
    await mkdir(join(root, 'b'));
    await writeFile(join(root, 'b', 'engines.yaml'), 'tools:\n  fabric: { title: Upholstery }\n');
    await symlink('b', join(root, 'next'));
    await rename(join(root, 'next'), join(root, 'current'));

    sut.process.kill('SIGHUP');

    await eventually(async () => (await titles()).get('fabric') === 'Upholstery', 'the retitled tool is listed');
    expect((await titles()).has('restyle')).toBe(false);
    expect(sut.process.exitCode).toBeNull();
  }, 30_000);
});
