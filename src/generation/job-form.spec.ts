import { BUILT_IN, Catalog, CATALOG, type CatalogInput, type CatalogTool } from '../catalog/catalog.js';
import { DomainError } from '../common/problem.js';
import { checkToolForm } from './job-form.js';

const image = (name: string): CatalogInput => ({
  name,
  kind: 'image',
  required: true,
  description: name,
  neutralDescription: name,
});
/** A configured tool whose two types take different inputs. */
const ACCESSORIES: CatalogTool = {
  id: 'fashion_accessories',
  group: 'fashion',
  title: 'Accessory try-on',
  configured: true,
  inputs: [image('person'), image('hat'), image('scarf')],
  generationTypes: [
    { id: 'hat_on', title: 'Hat', description: 'A hat.', inputs: [image('person'), image('hat')] },
    { id: 'scarf_on', title: 'Scarf', description: 'A scarf.', inputs: [image('person'), image('scarf')] },
  ],
};
const CONFIGURED = new Catalog([...CATALOG, ACCESSORIES], []);

function refusal(run: () => unknown): { code: string; detail: string } {
  try {
    run();
  } catch (error) {
    if (error instanceof DomainError) return { code: error.code, detail: error.message };
    throw error;
  }
  throw new Error('expected a refusal');
}

describe('checkToolForm against the catalog in use', () => {
  it("takes a configured tool's form for its default type", () => {
    const form = checkToolForm({ texts: [['tool', 'fashion_accessories']], files: ['person', 'hat'] }, CONFIGURED);

    expect(form).toMatchObject({ generationType: 'hat_on', images: ['person', 'hat'] });
  });

  it("refuses a field of the tool's other type, naming the type", () => {
    const sut = refusal(() =>
      checkToolForm({ texts: [['tool', 'fashion_accessories']], files: ['person', 'hat', 'scarf'] }, CONFIGURED),
    );

    expect(sut).toEqual({
      code: 'unexpected_field',
      detail: 'The field "scarf" is not a field of the generation type "hat_on".',
    });
  });

  it('refuses a tool the catalog in use does not have, whatever another catalog has', () => {
    const sut = refusal(() =>
      checkToolForm({ texts: [['tool', 'fashion_accessories']], files: ['person', 'hat'] }, BUILT_IN),
    );

    expect(sut.code).toBe('unknown_tool');
  });
});
