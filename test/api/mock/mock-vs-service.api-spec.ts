import { makeImage } from '../../support/jobs.js';
import { type RunningMock, startMock } from '../../support/mock.js';
import { serviceForBlock } from '../../support/service-block.js';
import { createUserWithKey } from '../../support/service.js';
import { file } from '../../support/uploads.js';
import { type FormValue, postJob, type ProblemBody } from '../../support/client.js';

const STARTUP_TIMEOUT_MS = 60_000;

type JobForm = Record<string, FormValue> | [string, FormValue][];

interface BadForm {
  name: string;
  status: number;
  code: string;
  /** The field `errors` names, when the problem lists offending fields. */
  field?: string;
  fields(image: FormValue): JobForm;
  headers?: Record<string, string>;
}

const BAD_FORMS: BadForm[] = [
  {
    name: 'fashion_swap without its person image',
    status: 400,
    code: 'validation_failed',
    field: 'person',
    fields: (image) => ({ tool: 'fashion_swap', clothes: image }),
  },
  {
    name: 'furniture without either of its images',
    status: 400,
    code: 'validation_failed',
    field: 'room',
    fields: () => ({ tool: 'furniture' }),
  },
  {
    name: 'fashion_card with a person image, which it does not take',
    status: 400,
    code: 'unexpected_field',
    field: 'person',
    fields: (image) => ({ tool: 'fashion_card', clothes: image, person: image }),
  },
  {
    name: 'a prompt on a tool without one',
    status: 400,
    code: 'unexpected_field',
    field: 'prompt',
    fields: (image) => ({ tool: 'fashion_card', clothes: image, prompt: 'warmer' }),
  },
  {
    name: 'a field no tool has',
    status: 400,
    code: 'unexpected_field',
    field: 'colour',
    fields: (image) => ({ tool: 'default', image, colour: 'red' }),
  },
  {
    name: 'an image sent twice',
    status: 400,
    code: 'unexpected_field',
    field: 'image',
    fields: (image) => [
      ['tool', 'default'],
      ['image', image],
      ['image', image],
    ],
  },
  {
    name: 'an image sent as text',
    status: 400,
    code: 'validation_failed',
    field: 'image',
    fields: () => ({ tool: 'default', image: 'a photo' }),
  },
  {
    name: 'the prompt sent as a file',
    status: 400,
    code: 'validation_failed',
    field: 'prompt',
    fields: (image) => ({ tool: 'default', image, prompt: image }),
  },
  {
    name: 'a prompt of 1001 characters',
    status: 400,
    code: 'validation_failed',
    field: 'prompt',
    fields: (image) => ({ tool: 'default', image, prompt: 'a'.repeat(1001) }),
  },
  {
    name: 'an image sent as the tool field',
    status: 400,
    code: 'validation_failed',
    field: 'tool',
    fields: (image) => ({ tool: image, image }),
  },
  {
    name: 'no tool',
    status: 400,
    code: 'validation_failed',
    field: 'tool',
    fields: (image) => ({ image }),
  },
  {
    name: 'an unknown tool',
    status: 422,
    code: 'unknown_tool',
    fields: (image) => ({ tool: 'hat_swap', image }),
  },
  {
    name: 'an empty generation type',
    status: 400,
    code: 'validation_failed',
    field: 'generation_type',
    fields: (image) => ({ tool: 'default', generation_type: '', image }),
  },
  {
    name: 'a generation type of another tool',
    status: 422,
    code: 'invalid_generation_type',
    fields: (image) => ({ tool: 'fashion_swap', generation_type: 'enhance', clothes: image, person: image }),
  },
  {
    // The form's fields are checked before its webhook URL, in both.
    name: 'a missing image and a webhook_url that is not a URL',
    status: 400,
    code: 'validation_failed',
    field: 'image',
    fields: () => ({ tool: 'default', webhook_url: 'not a url' }),
  },
  {
    // Prefer is read before the upload, in both.
    name: 'a missing image under a Prefer: wait out of range',
    status: 400,
    code: 'validation_failed',
    field: 'Prefer',
    fields: () => ({ tool: 'default' }),
    headers: { prefer: 'wait=0' },
  },
  {
    // So is Idempotency-Key, named as the service names it.
    name: 'a missing image under an Idempotency-Key of 256 characters',
    status: 400,
    code: 'validation_failed',
    field: 'Idempotency-Key',
    fields: () => ({ tool: 'default' }),
    headers: { 'idempotency-key': 'k'.repeat(256) },
  },
];

/**
 * The mock (scripts/mock.mjs) beside the service it stands in for: a job form that does not fit its tool gets the same
 * problem from both, so a frontend built on the mock meets the refusals it will meet in production.
 */
describe('the mock refuses a job form as the service does', () => {
  // No worker: the checks are all the API's own.
  const block = serviceForBlock({ ROLE: 'api' });
  let apiKey: string;
  let mock: RunningMock;
  let image: FormValue;

  beforeAll(async () => {
    apiKey = await createUserWithKey(block.env.databaseUrl);
    mock = await startMock();
    image = file(await makeImage(320, 400), 'image.png', 'image/png');
  }, STARTUP_TIMEOUT_MS);

  afterAll(() => mock?.stop());

  async function answerOf(response: Response) {
    const body = (await response.json()) as ProblemBody;
    return { status: response.status, contentType: response.headers.get('content-type'), body };
  }

  it.each(BAD_FORMS)('$name: $status $code from both', async ({ status, code, field, fields, headers }) => {
    const form = fields(image);

    const fromService = await answerOf(await postJob(block.sut.baseUrl, apiKey, form, headers));
    const fromMock = await answerOf(await postJob(mock.baseUrl, 'anything', form, headers));

    expect(fromService).toMatchObject({ status, contentType: 'application/problem+json; charset=utf-8' });
    expect(fromService.body).toMatchObject({ status, code });
    expect(fromService.body.errors?.[0]?.field).toBe(field);
    expect(fromMock).toEqual(fromService);
  });

  it.each([
    ['a JSON job without its inputs', 'application/json', JSON.stringify({ tool: 'default' }), 'validation_failed'],
    [
      'a JSON job carrying its image in base64',
      'application/json',
      JSON.stringify({ tool: 'default', inputs: { image: 'aGVsbG8=' } }),
      'validation_failed',
    ],
    [
      'a JSON job naming an input its tool lacks',
      'application/json',
      JSON.stringify({ tool: 'default', inputs: { person: 'file_1' } }),
      'unexpected_field',
    ],
    ['a job as plain text', 'text/plain', 'tool=default', 'malformed_multipart'],
  ])('refuses %s in both, alike', async (_name, contentType, body, code) => {
    const send = (baseUrl: string, key: string) =>
      fetch(`${baseUrl}/generation/generate_image_v2/`, {
        method: 'POST',
        headers: { Authorization: `Bearer ${key}`, 'Content-Type': contentType },
        body,
      });

    const fromService = await answerOf(await send(block.sut.baseUrl, apiKey));
    const fromMock = await answerOf(await send(mock.baseUrl, 'anything'));

    expect(fromService).toMatchObject({ status: 400, body: { code } });
    expect(fromMock).toEqual(fromService);
  });

  it.each(['fashion_swap', 'fashion_swap_half', 'fabric', 'hat_swap'])(
    'answers the generation types of %s as the service does',
    async (tool) => {
      const path = `/generation/generationTypes?tool=${tool}`;
      const ask = (baseUrl: string, key: string) =>
        fetch(`${baseUrl}${path}`, { headers: { Authorization: `Bearer ${key}` } });

      const [fromService, fromMock] = await Promise.all([
        ask(block.sut.baseUrl, apiKey),
        ask(mock.baseUrl, 'anything'),
      ]);

      expect(fromMock.status).toBe(fromService.status);
      expect(await fromMock.json()).toEqual(await fromService.json());
    },
  );

  it('accepts a form that fits its tool in both: 202 pending', async () => {
    const form = { tool: 'default', image, prompt: 'Brighter, warmer light.' };

    const fromService = await postJob(block.sut.baseUrl, apiKey, form);
    const fromMock = await postJob(mock.baseUrl, 'anything', form);

    expect([fromService.status, fromMock.status]).toEqual([202, 202]);
    expect(await fromService.json()).toMatchObject({ status: 'pending' });
    expect(await fromMock.json()).toMatchObject({ status: 'pending' });
  });
});
