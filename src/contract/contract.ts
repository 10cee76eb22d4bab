import { readFileSync } from 'node:fs';
import type { Request } from 'express';
import { parse } from 'yaml';
import type { AppConfig } from '../config/config.js';

/** `openapi/openapi.yaml`, the source of truth, as shipped beside the code. */
const CONTRACT_PATH = new URL('../../openapi/openapi.yaml', import.meta.url);

/** The committed file's top-level `servers:` block (its documented development server), up to the next key. */
const SERVERS_BLOCK = /^servers:\n(?:[ -].*\n)+/m;

export class Contract {
  private readonly yamlAround: [string, string];

  constructor(
    readonly yaml: string,
    readonly document: Record<string, unknown>,
  ) {
    const block = SERVERS_BLOCK.exec(yaml);
    if (!block) throw new Error('openapi.yaml has no top-level servers block');
    this.yamlAround = [yaml.slice(0, block.index), yaml.slice(block.index + block[0].length)];
  }

  static load(): Contract {
    const yaml = readFileSync(CONTRACT_PATH, 'utf8');
    return new Contract(yaml, parse(yaml) as Record<string, unknown>);
  }

  /** The document naming `server` as its only server. */
  documentFor(server: string): Record<string, unknown> {
    return { ...this.document, servers: [{ url: server, description: 'This service' }] };
  }

  /** The YAML text naming `server` as its only server; everything else byte for byte as committed. */
  yamlFor(server: string): string {
    return `${this.yamlAround[0]}servers:\n  - url: ${JSON.stringify(server)}\n    description: This service\n${this.yamlAround[1]}`;
  }
}

/**
 * The server a served copy of the contract names, so that Swagger UI's "Try it out" and generated clients call the
 * service wherever it is reached: PUBLIC_BASE_URL when set, else the origin of the request (behind a proxy, as
 * TRUST_PROXY_HOPS lets Express read it).
 */
export function servedServer(config: AppConfig, request: Request): string {
  return config.contractServerUrl ?? `${request.protocol}://${request.get('host') ?? `localhost:${config.port}`}`;
}
