import { mkdtemp, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runCli } from '../../support/service.js';

const TOOL = `
engines:
  hats:
    kind: cog
    url: http://127.0.0.1:9
tools:
  fashion_accessories:
    group_tool: fashion
    title: Accessory try-on
    generation_types:
      hat:
        title: Hat
        description: Places a hat on the person's head.
        inputs:
          person: { kind: image, required: true, description: Photo of one person. }
          accessory: { kind: image, required: true, description: The hat alone. }
  lengerie: { disabled: true }
routes:
  fashion_accessories:
    engine: hats
    inputs: { person: person_img, accessory: item_img }
`;

/** `igs routing check`, as an operator runs it on a file before putting it where the service reads it. */
describe('igs routing check', () => {
  async function fileWith(yaml: string): Promise<string> {
    const path = join(await mkdtemp(join(tmpdir(), 'routing-check-')), 'engines.yaml');
    await writeFile(path, yaml);
    return path;
  }

  it("lists a good file's tools and routes, and exits 0", async () => {
    const path = await fileWith(TOOL);

    const { code, stdout } = await runCli(['routing', 'check', path], {});

    expect(code).toBe(0);
    expect(stdout.split('\n')).toEqual(
      expect.arrayContaining([
        `${path} passes the checks.`,
        'tool\tfashion_accessories\tconfigured\tAccessory try-on\that',
        'tool\tlengerie\twithdrawn\tLingerie try-on',
        'route\tfashion_accessories\thats (cog)',
      ]),
    );
  }, 30_000);

  it("names a bad file's problems by their key paths, and exits 1", async () => {
    const path = await fileWith(TOOL.replace('engine: hats', 'engine: hatz'));

    const { code, stderr } = await runCli(['routing', 'check', path], {});

    expect(code).toBe(1);
    expect(stderr).toContain(
      `ENGINES_FILE ${path}: routes.fashion_accessories.engine: there is no engine "hatz" under engines (engines: hats)`,
    );
  }, 30_000);
});
