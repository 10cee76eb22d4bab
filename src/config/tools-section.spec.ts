import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { AppConfig, ConfigError } from './config.js';

const ENGINE = `
engines:
  hats:
    kind: cog
    url: http://gpu-3:5000
`;
const HAT_TOOL = `
tools:
  fashion_accessories:
    group_tool: fashion
    title: Accessory try-on
    generation_types:
      scarf:
        title: Scarf
        description: Drapes a scarf around the neck.
        inputs:
          person: { kind: image, required: true, description: Photo of one person. }
          accessory: { kind: image, required: true, description: The scarf alone. }
      hat:
        title: Hat
        description: Places a hat on the person's head.
        default: true
        inputs:
          person: { kind: image, required: true, description: 'Photo of one person, head and shoulders.' }
          accessory: { kind: image, required: true, description: 'The hat alone, any background.' }
          prompt: { kind: text, required: false, max_length: 500, description: Style hints. }
`;
const HAT_ROUTE = `
routes:
  fashion_accessories:
    engine: hats
    inputs: { person: person_img, accessory: item_img, prompt: prompt }
`;

function fileWith(yaml: string): string {
  const path = join(mkdtempSync(join(tmpdir(), 'tools-section-')), 'engines.yaml');
  writeFileSync(path, yaml);
  return path;
}

function problemsOf(yaml: string): string[] {
  const path = fileWith(yaml);
  try {
    new AppConfig({ ENGINES_FILE: path });
  } catch (error) {
    if (error instanceof ConfigError)
      return error.problems.map((problem) => problem.replace(`ENGINES_FILE ${path}: `, ''));
    throw error;
  }
  throw new Error('expected the configuration to be refused');
}

describe("the routing file's tools: section", () => {
  it('adds a tool, its default type first, each type with its own inputs and text limits', () => {
    const { catalog } = new AppConfig({ ENGINES_FILE: fileWith(ENGINE + HAT_TOOL + HAT_ROUTE) });

    const tool = catalog.findTool('fashion_accessories');
    expect(tool).toMatchObject({ group: 'fashion', title: 'Accessory try-on', configured: true });
    expect(tool!.generationTypes.map((type) => type.id)).toEqual(['hat', 'scarf']);
    expect(tool!.generationTypes[0].inputs).toEqual([
      expect.objectContaining({ name: 'person', kind: 'image', required: true }),
      expect.objectContaining({ name: 'accessory', kind: 'image', required: true }),
      {
        name: 'prompt',
        kind: 'text',
        required: false,
        maxLength: 500,
        description: 'Style hints.',
        neutralDescription: 'Style hints.',
      },
    ]);
    expect(tool!.generationTypes[1].inputs.map((input) => input.name)).toEqual(['person', 'accessory']);
    expect(catalog.tools.map((candidate) => candidate.id).at(-1)).toBe('fashion_accessories');
  });

  it('withdraws and retitles built-in tools, keeping a withdrawn one aside for its jobs', () => {
    const { catalog } = new AppConfig({
      ENGINES_FILE: fileWith('tools:\n  lengerie: { disabled: true }\n  fabric: { title: Upholstery }\n'),
    });

    expect(catalog.findTool('lengerie')).toBeUndefined();
    expect(catalog.withdrawn.map((tool) => tool.id)).toEqual(['lengerie']);
    expect(catalog.findTool('fabric')?.title).toBe('Upholstery');
    expect(catalog.findTool('fabric')?.generationTypes[0].id).toBe('fabric_retexture');
  });

  it.each([
    [
      'a configured tool without a route',
      ENGINE + HAT_TOOL,
      'tools.fashion_accessories.generation_types.hat: a configured tool runs on a model server; add a route (routes.fashion_accessories or routes.fashion_accessories/hat)',
    ],
    [
      'a generation type id another tool has',
      HAT_TOOL.replace('      scarf:', '      upper:') + ENGINE + HAT_ROUTE,
      'tools.fashion_accessories.generation_types.upper: generation type ids are unique across all tools, and "upper" is one of "fashion_swap_half"',
    ],
    [
      'a tool id not of the pattern',
      'tools:\n  Hats: { group_tool: fashion, title: Hats, generation_types: {} }\n',
      'tools.Hats: a tool id is 2 to 40 lowercase letters, digits and underscores, starting with a letter',
    ],
    [
      "a built-in tool's generation types",
      'tools:\n  fabric:\n    generation_types: { plaid: { title: P, description: P, inputs: { fabric: { kind: image, description: F } } } }\n',
      'tools.fabric.generation_types: unknown key: "fabric" is a built-in tool, whose generation types and inputs are the service\'s; only its title and disabled may be set',
    ],
    [
      'a max_length on an image',
      HAT_TOOL.replace(
        'accessory: { kind: image, required: true, description: The scarf alone. }',
        'accessory: { kind: image, max_length: 5, description: The scarf alone. }',
      ) +
        ENGINE +
        HAT_ROUTE,
      'tools.fashion_accessories.generation_types.scarf.inputs.accessory.max_length: only a text input has a max_length',
    ],
    [
      'a text longer than a form field holds',
      HAT_TOOL.replace('max_length: 500', 'max_length: 5000') + ENGINE + HAT_ROUTE,
      'tools.fashion_accessories.generation_types.hat.inputs.prompt.max_length: must be a whole number from 1 to 1000',
    ],
    [
      'two defaults',
      HAT_TOOL.replace('        title: Scarf\n', '        title: Scarf\n        default: true\n') + ENGINE + HAT_ROUTE,
      'tools.fashion_accessories.generation_types: one type is the default, not scarf and hat',
    ],
    [
      'an input the route maps that no type has',
      ENGINE + HAT_TOOL + HAT_ROUTE.replace('prompt: prompt', 'prompt: prompt, veil: veil_img'),
      'routes.fashion_accessories.inputs.veil: tool "fashion_accessories" has no input "veil" (inputs: person, accessory, prompt)',
    ],
    [
      'a missing title',
      HAT_TOOL.replace('    title: Accessory try-on\n', '') + ENGINE + HAT_ROUTE,
      'tools.fashion_accessories.title: is required',
    ],
    [
      'a description cut by a comma in a flow mapping',
      HAT_TOOL.replace("'The hat alone, any background.'", 'The hat alone, any background.') + ENGINE + HAT_ROUTE,
      'tools.fashion_accessories.generation_types.hat.inputs.accessory.any background.: unknown key (allowed: kind, required, description, max_length); in { }, a comma ends a value: quote a text that has one',
    ],
  ])('refuses %s, naming the key path', (_case, yaml, problem) => {
    expect(problemsOf(yaml)).toContain(problem);
  });

  it('takes a route to one generation type of a configured tool, checked against that type inputs', () => {
    const routes = `
routes:
  fashion_accessories/hat:
    engine: hats
    inputs: { person: person_img, accessory: item_img, prompt: prompt }
  fashion_accessories/scarf:
    engine: hats
    inputs: { person: person_img, accessory: item_img, prompt: prompt }
`;
    expect(problemsOf(ENGINE + HAT_TOOL + routes)).toEqual([
      'routes.fashion_accessories/scarf.inputs.prompt: tool "fashion_accessories" has no input "prompt" (inputs: person, accessory)',
    ]);
  });
});
