import { readFile } from 'node:fs/promises';
import { CATALOG } from '../../catalog/catalog.js';
import { LOCAL_PIPELINES, LocalEngine } from './local.engine.js';

/**
 * The catalog (what clients are offered and uploads are checked against) and the local engine (what the worker
 * runs) are written apart; these tests fail when they drift.
 */
const catalogPairs = CATALOG.flatMap((tool) => tool.generationTypes.map((type) => [tool.id, type.id] as const));
const pipelinePairs = Object.entries(LOCAL_PIPELINES).flatMap(([tool, types]) =>
  Object.keys(types).map((type) => [tool, type] as const),
);

/** The examples in docs/examples: one folder per tool, or per tool and generation type where a tool has several. */
function exampleFolder(tool: string, type: string): string {
  const types = CATALOG.find((entry) => entry.id === tool)!.generationTypes;
  return `docs/examples/${types.length > 1 ? `${tool}-${type}` : tool}`;
}

describe('the catalog and the local engine', () => {
  const sut = new LocalEngine();

  it('offer the same tools and generation types', () => {
    expect([...pipelinePairs].sort()).toEqual([...catalogPairs].sort());
  });

  it.each(catalogPairs)(
    '%s / %s: the pipeline reads exactly the image inputs the catalog requires',
    async (tool, type) => {
      const catalogTool = CATALOG.find((entry) => entry.id === tool)!;
      const imageInputs = catalogTool.inputs.filter((input) => input.kind === 'image');
      const images: Record<string, Buffer> = {};
      for (const input of imageInputs) {
        images[input.name] = await readFile(`${exampleFolder(tool, type)}/input-${input.name}.jpg`);
      }
      const read = new Set<string>();
      const recorded = new Proxy(images, {
        getOwnPropertyDescriptor(target, name) {
          if (typeof name === 'string') read.add(name);
          return Reflect.getOwnPropertyDescriptor(target, name);
        },
      });

      const result = await sut.generate({ jobId: 'job-1', tool, generationType: type, images: recorded, texts: {} });

      expect(result.kind).toBe('raw');
      const required = imageInputs.filter((input) => input.required).map((input) => input.name);
      expect([...read].sort()).toEqual(expect.arrayContaining(required.sort()));
      expect(imageInputs.map((input) => input.name)).toEqual(expect.arrayContaining([...read]));
    },
    30_000,
  );
});
