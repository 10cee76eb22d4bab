import { execFile } from 'node:child_process';
import { mkdtemp, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { type FakeCog, startFakeCog } from '../../support/fake-cog.js';
import { FAST_TIMINGS, uniqueImage } from '../../support/harness.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';

const run = promisify(execFile);
const BIN = resolve('node_modules/.bin');

/** A tool the service does not ship: the routing file adds it, routed to a Cog model. */
const ROUTING = (url: string) => `
engines:
  bags:
    kind: cog
    url: ${url}
tools:
  bag_swap:
    group_tool: fashion
    title: Bag try-on
    generation_types:
      shoulder_bag:
        title: Shoulder bag
        description: Hangs the bag on the person's shoulder.
        inputs:
          person: { kind: image, required: true, description: Photo of one person. }
          bag: { kind: image, required: true, description: The bag alone. }
          note: { kind: text, required: false, max_length: 50, description: A styling note. }
routes:
  bag_swap:
    engine: bags
    inputs: { person: human, bag: item, note: note }
`;

/**
 * A client a team would write from the contract alone: types by openapi-typescript, requests by openapi-fetch, the
 * form built from what `generationTypes` lists, so a tool added after the contract was written is called like any.
 */
const PROGRAM = `
import { readFile } from 'node:fs/promises';
import createClient from 'openapi-fetch';
import type { components, paths } from './schema.js';

type Input = components['schemas']['GenerationInput'];
const [baseUrl, apiKey, imagePath, toolId] = process.argv.slice(2);
const client = createClient<paths>({ baseUrl, headers: { Authorization: \`Bearer \${apiKey}\` } });

const tools = (await client.GET('/generation/tools')).data ?? [];
const tool = tools.find((candidate) => candidate.tool === toolId);
if (!tool) throw new Error(\`no tool \${toolId} in \${JSON.stringify(tools)}\`);
const types = (await client.GET('/generation/generationTypes', { params: { query: { tool: tool.tool } } })).data ?? [];
const type = types.find((candidate) => candidate.is_default)!;
const image = new Blob([await readFile(imagePath)], { type: 'image/png' });
const fields: Record<string, Blob | string> = { tool: tool.tool, generation_type: type.generation_type };
for (const input of type.inputs as Input[]) {
  if (input.kind === 'image') fields[input.name] = image;
  else fields[input.name] = 'x'.repeat(Math.min(input.max_length ?? 10, 10));
}
const created = await client.POST('/generation/generate_image_v2/', {
  body: fields as never,
  bodySerializer: (body) => {
    const form = new FormData();
    for (const [name, value] of Object.entries(body as Record<string, Blob | string>)) {
      if (typeof value === 'string') form.append(name, value);
      else form.append(name, value, name + '.png');
    }
    return form;
  },
  headers: { Prefer: 'wait=30' },
});
if (!created.data) throw new Error(\`job refused: \${JSON.stringify(created.error)}\`);
const item = (await client.GET('/user/generation-history/{id}', {
  params: { path: { id: created.data.history_item_id } },
  headers: { Prefer: 'wait=30' },
})).data!;
console.log(JSON.stringify({ tool: item.tool, generation_type: item.generation_type, status: item.status }));
`;

describe('a client generated from the contract (openapi-typescript + openapi-fetch)', () => {
  let env: TestEnvironment;
  let fake: FakeCog;
  let sut: RunningService;
  let key: string;
  let folder: string;

  beforeAll(async () => {
    fake = await startFakeCog();
    fake.setSchema({ properties: { human: { type: 'string' }, item: { type: 'string' }, note: { type: 'string' } } });
    env = await createTestEnvironment();
    folder = await mkdtemp(join(tmpdir(), 'generated-client-'));
    await writeFile(join(folder, 'engines.yaml'), ROUTING(fake.url));
    sut = await startService({
      ...env.serviceEnv,
      ...FAST_TIMINGS,
      ROLE: 'all',
      ENGINES_FILE: join(folder, 'engines.yaml'),
    });
    key = await createUserWithKey(env.databaseUrl);
  }, 60_000);

  afterAll(async () => {
    await sut?.stop();
    await fake?.close();
    await env?.dispose();
  });

  it('compiles, and calls a tool the routing file added', async () => {
    await run(`${BIN}/openapi-typescript`, [resolve('openapi/openapi.yaml'), '-o', join(folder, 'schema.d.ts')]);
    await writeFile(join(folder, 'call.ts'), PROGRAM);
    await writeFile(join(folder, 'package.json'), JSON.stringify({ type: 'module' }));
    await writeFile(
      join(folder, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          target: 'es2022',
          module: 'nodenext',
          moduleResolution: 'nodenext',
          strict: true,
          skipLibCheck: true,
          lib: ['es2022', 'dom'],
          types: ['node'],
          typeRoots: [resolve('node_modules/@types')],
        },
        files: ['call.ts'],
      }),
    );
    // The packages a client project would install.
    await symlink(resolve('node_modules'), join(folder, 'node_modules'));
    await writeFile(join(folder, 'image.png'), await uniqueImage());

    await run(`${BIN}/tsc`, ['-p', join(folder, 'tsconfig.json')]);
    const { stdout } = await run(process.execPath, [
      join(folder, 'call.js'),
      sut.baseUrl,
      key,
      join(folder, 'image.png'),
      'bag_swap',
    ]);

    expect(JSON.parse(stdout)).toEqual({ tool: 'bag_swap', generation_type: 'shoulder_bag', status: 'complete' });
    const [prediction] = fake.requests;
    expect(Object.keys(prediction.images).sort()).toEqual(['human', 'item']);
    expect(prediction.texts).toEqual({ note: 'xxxxxxxxxx' });
  }, 60_000);
});
