import { readFileSync } from 'node:fs';
import { parse } from 'yaml';

/** `openapi/openapi.yaml`, the source of truth, as shipped beside the code. */
const CONTRACT_PATH = new URL('../../openapi/openapi.yaml', import.meta.url);

export class Contract {
  constructor(
    readonly yaml: string,
    readonly document: Record<string, unknown>,
  ) {}

  static load(): Contract {
    const yaml = readFileSync(CONTRACT_PATH, 'utf8');
    return new Contract(yaml, parse(yaml) as Record<string, unknown>);
  }
}
