import contractSchema from '../../support/contract-schema.cjs';
import { expectMatchesContract } from '../../support/contract.js';
import { serviceForBlock } from '../../support/service-block.js';
import { createUserWithKey } from '../../support/service.js';

/** What API.md promises for each tool: its group and the multipart inputs job creation takes. */
const EXPECTED_TOOLS = [
  { group_tool: 'fashion', tool: 'fashion_swap', title: 'Virtual try-on' },
  { group_tool: 'fashion', tool: 'fashion_swap_half', title: 'Half-body try-on' },
  { group_tool: 'fashion', tool: 'fashion_card', title: 'Product card' },
  { group_tool: 'fashion', tool: 'lengerie', title: 'Lingerie try-on' },
  { group_tool: 'interior', tool: 'furniture', title: 'Furniture placement' },
  { group_tool: 'textile', tool: 'fabric', title: 'Fabric retexture' },
  { group_tool: 'default', tool: 'default', title: 'Image enhance' },
];

type Input = { name: string; kind: 'image' | 'text'; required: boolean };
const image = (name: string): Input => ({ name, kind: 'image', required: true });
const EXPECTED_INPUTS: Record<string, Input[]> = {
  fashion_swap: [image('clothes'), image('person')],
  fashion_swap_half: [image('clothes'), image('person')],
  fashion_card: [image('clothes')],
  lengerie: [image('clothes'), image('person')],
  furniture: [image('room'), image('furniture')],
  fabric: [image('fabric'), image('target')],
  default: [image('image'), { name: 'prompt', kind: 'text', required: false }],
};

/** The pattern of the ids the contract's history list filter takes (GenerationTypeId). */
function historyFilterPattern(): RegExp {
  const contract = contractSchema.loadContract() as {
    components: { schemas: Record<string, { pattern: string }> };
  };
  return new RegExp(contract.components.schemas.GenerationTypeId.pattern);
}

interface GenerationType {
  generation_type: string;
  tool: string;
  title: string;
  description: string;
  is_default: boolean;
  inputs: Array<Input & { description: string }>;
}

describe('catalog', () => {
  const block = serviceForBlock();
  let authorization: string;

  beforeAll(async () => {
    authorization = `Bearer ${await createUserWithKey(block.env.databaseUrl)}`;
  });

  function get(path: string): Promise<Response> {
    return fetch(`${block.sut.baseUrl}${path}`, { headers: { authorization } });
  }

  describe('GET /generation/tools', () => {
    it('lists the seven tools with their groups and titles, in catalog order', async () => {
      const response = await get('/generation/tools');

      expect(response.status).toBe(200);
      const body = await expectMatchesContract(response, 'GET', '/generation/tools');
      expect(body).toEqual(EXPECTED_TOOLS);
    });

    it('keeps the seed spelling of the lingerie tool', async () => {
      const response = await get('/generation/tools');

      const body = (await response.json()) as Array<{ tool: string }>;
      expect(body.map((t) => t.tool)).toContain('lengerie');
      expect(body.map((t) => t.tool)).not.toContain('lingerie');
    });
  });

  describe('GET /generation/generationTypes', () => {
    it.each(EXPECTED_TOOLS.map((t) => t.tool))('lists the generation types of %s', async (tool) => {
      const response = await get(`/generation/generationTypes?tool=${tool}`);

      expect(response.status).toBe(200);
      const body = (await expectMatchesContract(response, 'GET', '/generation/generationTypes')) as GenerationType[];
      expect(body.length).toBeGreaterThanOrEqual(1);
      expect(body.filter((type) => type.is_default)).toHaveLength(1);
      expect(body[0].is_default).toBe(true);
      for (const type of body) {
        expect(type.tool).toBe(tool);
        expect(type.title).not.toBe('');
        expect(type.description).not.toBe('');
        expect(type.inputs.map(({ name, kind, required }) => ({ name, kind, required }))).toEqual(
          EXPECTED_INPUTS[tool],
        );
        for (const input of type.inputs) expect(input.description).not.toBe('');
      }
    });

    it('gives every generation type an identifier no other tool uses, the ones the history filter accepts', async () => {
      const ids: string[] = [];
      for (const { tool } of EXPECTED_TOOLS) {
        const body = (await (await get(`/generation/generationTypes?tool=${tool}`)).json()) as GenerationType[];
        ids.push(...body.map((type) => type.generation_type));
      }

      expect(new Set(ids).size).toBe(ids.length);
      for (const id of ids) expect(id).toMatch(historyFilterPattern());
    });

    it('offers the upper and lower half variants for fashion_swap_half', async () => {
      const response = await get('/generation/generationTypes?tool=fashion_swap_half');

      const body = (await response.json()) as GenerationType[];
      expect(body.map((type) => type.generation_type)).toEqual(expect.arrayContaining(['upper', 'lower']));
    });

    it('answers 400 without a tool', async () => {
      const response = await get('/generation/generationTypes');

      expect(response.status).toBe(400);
      const body = await expectMatchesContract(response, 'GET', '/generation/generationTypes');
      expect(body).toMatchObject({ status: 400, code: 'validation_failed', errors: [{ field: 'tool' }] });
    });

    it('answers 400 with an empty tool', async () => {
      const response = await get('/generation/generationTypes?tool=');

      expect(response.status).toBe(400);
      const body = await expectMatchesContract(response, 'GET', '/generation/generationTypes');
      expect(body).toMatchObject({ status: 400, code: 'validation_failed' });
    });

    it('answers 400 when tool is sent twice', async () => {
      const response = await get('/generation/generationTypes?tool=fabric&tool=default');

      expect(response.status).toBe(400);
      await expectMatchesContract(response, 'GET', '/generation/generationTypes');
    });

    it('answers 404 for an unknown tool', async () => {
      const response = await get('/generation/generationTypes?tool=no_such_tool');

      expect(response.status).toBe(404);
      const body = await expectMatchesContract(response, 'GET', '/generation/generationTypes');
      expect(body).toMatchObject({ status: 404, code: 'not_found' });
    });

    it('answers 404 for a tool name that only differs in case', async () => {
      const response = await get('/generation/generationTypes?tool=Fabric');

      expect(response.status).toBe(404);
      await expectMatchesContract(response, 'GET', '/generation/generationTypes');
    });
  });
});
