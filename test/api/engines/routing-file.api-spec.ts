import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { Client, type GenerationTypesBody } from '../../support/client.js';
import { runToExit } from '../../support/deployment.js';
import { createTestEnvironment, type TestEnvironment } from '../../support/environment.js';
import { createUserWithKey, type RunningService, startService } from '../../support/service.js';

const MAIN = new URL('../../../dist/main.js', import.meta.url).pathname;
const EXAMPLE = resolve('docs/routing/engines.yaml');
/** What the example's `${VAR}`s need; nothing is contacted at boot. */
const EXAMPLE_ENV = {
  VTON_URL: 'http://127.0.0.1:9',
  REPLICATE_API_TOKEN: 'r8_example',
  COMFY_URL: 'http://127.0.0.1:9',
  COMFY_TOKEN: 'example',
};

/** Starts the built service and resolves with its exit code and output, for a boot that must fail. */
function failedBoot(env: Record<string, string>): Promise<{ code: number | null; output: string }> {
  return runToExit(['node', MAIN], { HOST: '127.0.0.1', PORT: '0', ...env }, 20_000);
}

describe('the routing file at boot', () => {
  let env: TestEnvironment;

  beforeAll(async () => {
    env = await createTestEnvironment();
  });

  afterAll(async () => {
    await env.dispose();
  });

  describe('the documented example (docs/routing/engines.yaml)', () => {
    let service: RunningService;
    let key: string;

    beforeAll(async () => {
      service = await startService({ ...env.serviceEnv, ROLE: 'api', ENGINES_FILE: EXAMPLE, ...EXAMPLE_ENV });
      key = await createUserWithKey(env.databaseUrl);
    }, 60_000);

    afterAll(async () => {
      await service?.stop();
    });

    async function generationTypes(tool: string): Promise<GenerationTypesBody> {
      const answer = await new Client(service.baseUrl, key).generationTypes(tool);
      expect(answer.status).toBe(200);
      return answer.body;
    }

    it('boots, and a routed generation type describes its inputs as its route says', async () => {
      const [upper, lower] = await generationTypes('fashion_swap_half');

      expect(upper.generation_type).toBe('upper');
      expect(Object.fromEntries(upper.inputs.map((input) => [input.name, input.description]))).toEqual({
        person: 'Photo of one person facing the camera, the upper body in view.',
        clothes: 'Photo of the top, laid flat or on a hanger.',
      });
      expect(lower.inputs.find((input) => input.name === 'person')?.description).toBe(
        'Photo of one person facing the camera, the legs in view.',
      );
    });

    it('describes a routed tool with no describe texts neutrally, not with the local engine\u2019s requirements', async () => {
      const [placement] = await generationTypes('furniture');

      expect(placement.inputs.map((input) => input.description)).toEqual([
        'Photo of the room.',
        'Photo of the piece of furniture.',
      ]);
    });

    it('keeps the local engine\u2019s descriptions for a tool with no route', async () => {
      const [card] = await generationTypes('fashion_card');

      expect(card.inputs[0].description).toContain('plain, evenly coloured background');
    });
  });

  it('stops the boot of a broken routing file with a message naming the file and the key path', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'routing-'));
    const path = join(dir, 'engines.yaml');
    await writeFile(
      path,
      'engines:\n  vton:\n    kind: cog\n    url: http://127.0.0.1:9\nroutes:\n  fashion_swap:\n    engine: vton\n    inputs: { person: human_img, garment: garm_img }\n',
    );

    const { code, output } = await failedBoot({ ...env.serviceEnv, ROLE: 'api', ENGINES_FILE: path });

    expect(code).not.toBe(0);
    expect(output).toContain(
      `ENGINES_FILE ${path}: routes.fashion_swap.inputs.garment: tool "fashion_swap" has no input "garment" (inputs: clothes, person)`,
    );
    expect(output).toContain(
      `ENGINES_FILE ${path}: routes.fashion_swap.inputs: the tool's required input "clothes" is not mapped`,
    );
    // A process's start (its modules loaded, then the check) takes seconds on a busy machine.
  }, 30_000);
});
