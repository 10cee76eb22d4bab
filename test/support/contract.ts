import { Ajv2019 } from 'ajv/dist/2019.js';
import addFormats from 'ajv-formats';
import contractSchema from './contract-schema.cjs';

const contract = contractSchema.loadContract();
const ajv = new Ajv2019({ allErrors: true, strict: false });
(addFormats as unknown as (ajv: Ajv2019) => void)(ajv);

/**
 * Asserts that a response is one the contract documents for this operation: its status is listed, its
 * Content-Type is the documented one and a JSON body validates against the documented schema, which it returns.
 */
export async function expectMatchesContract(
  response: Response,
  method: string,
  pathTemplate: string,
): Promise<unknown> {
  const documented = contractSchema.documentedResponse(contract, method, pathTemplate, response.status);
  if (!documented) throw new Error(`${method} ${pathTemplate}: status ${response.status} is not in the contract`);
  const content = documented.content as Record<string, unknown> | undefined;
  const contentType = (response.headers.get('content-type') ?? '').split(';')[0].trim();
  if (!content) {
    if (response.status !== 204 && contentType) {
      throw new Error(`${method} ${pathTemplate} ${response.status}: no body documented, got ${contentType}`);
    }
    return undefined;
  }
  if (!(contentType in content)) {
    throw new Error(
      `${method} ${pathTemplate} ${response.status}: Content-Type ${contentType} is not one of ${Object.keys(content).join(', ')}`,
    );
  }
  // Binary and text bodies (media, the YAML contract) are left unread for the caller.
  if (!contentType.endsWith('json')) return undefined;
  const text = await response.text();
  const body: unknown = JSON.parse(text);
  const schema = contractSchema.responseSchema(contract, method, pathTemplate, response.status, contentType);
  if (schema && !ajv.validate(schema, body)) {
    throw new Error(
      `${method} ${pathTemplate} ${response.status}: body breaks the contract: ${ajv.errorsText(ajv.errors)}\n${text}`,
    );
  }
  return body;
}
