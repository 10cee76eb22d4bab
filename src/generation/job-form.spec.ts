import { BUILT_IN, Catalog, CATALOG, type CatalogInput, type CatalogTool } from '../catalog/catalog.js';
import { DomainError } from '../common/problem.js';
import { checkToolForm, checkWebhookEvents } from './job-form.js';

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

const URL = 'https://app.example.com/hooks';

function refused(work: () => unknown): DomainError {
  try {
    work();
  } catch (error) {
    if (error instanceof DomainError) return error;
    throw error;
  }
  throw new Error('not refused');
}

describe('checkWebhookEvents (webhook_events, from a repeated form field or a JSON array)', () => {
  it('is the default, the final state alone, when absent or when it asks for that alone', () => {
    expect(checkWebhookEvents(undefined, false)).toBeNull();
    expect(checkWebhookEvents(['completed'], true)).toBeNull();
  });

  it('keeps the events asked for in one order, each once, the final state always among them', () => {
    expect(checkWebhookEvents(['progress', 'started', 'progress'], true)).toEqual(['started', 'progress', 'completed']);
  });

  it.each([[['finished']], [['started', '']], [[1]]])('refuses %j as 422 naming webhook_events', (values) => {
    const sut = refused(() => checkWebhookEvents(values, true));

    expect([sut.status, sut.code, sut.options.errors?.[0].field]).toEqual([
      422,
      'invalid_webhook_events',
      'webhook_events',
    ]);
  });

  it('refuses events without a webhook_url to send them to', () => {
    expect(refused(() => checkWebhookEvents(['started'], false)).code).toBe('invalid_webhook_events');
  });
});

describe('checkToolForm with webhook_events', () => {
  const form = (texts: [string, string][]) =>
    checkToolForm({ texts: [['tool', 'fashion_card'], ...texts], files: ['clothes'] }, BUILT_IN);

  it('takes the field once per event, as a browser sends a repeated field', () => {
    const sut = form([
      ['webhook_url', URL],
      ['webhook_events', 'started'],
      ['webhook_events', 'progress'],
    ]);

    expect(sut.webhookEvents).toEqual(['started', 'progress', 'completed']);
  });

  it('still refuses any other field sent twice', () => {
    const sut = refused(() =>
      form([
        ['webhook_url', URL],
        ['webhook_url', URL],
      ]),
    );

    expect(sut.code).toBe('unexpected_field');
  });

  it('refuses the field sent as a file', () => {
    const sut = refused(() =>
      checkToolForm({ texts: [['tool', 'fashion_card']], files: ['clothes', 'webhook_events'] }, BUILT_IN),
    );

    expect([sut.code, sut.options.errors?.[0].field]).toEqual(['validation_failed', 'webhook_events']);
  });
});
