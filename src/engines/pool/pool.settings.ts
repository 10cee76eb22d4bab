import type { Json, ServerCheckContext } from '../../config/engines-file.js';
import type { PoolSetting } from '../../config/engine-settings.js';

/** The keys of a server that may be a pool (cog, comfyui): `url`, or `urls`, or `url` with `discover: dns`. */
export const POOL_PROPERTIES = {
  url: { type: 'string' },
  urls: { type: 'array', minItems: 1, items: { type: 'string' } },
  discover: { enum: ['dns'] },
} as const;

/** The pool a server's keys name, each URL checked as `url` is; a problem at the key path for each mistake. */
export function poolSetting(raw: Json, { at, url, problem }: ServerCheckContext): PoolSetting {
  const one = raw.url as string | undefined;
  const many = raw.urls as string[] | undefined;
  const discover = raw.discover as 'dns' | undefined;
  if (one !== undefined && many !== undefined) problem(`${at}: give url (one server) or urls (a pool), not both`);
  if (one === undefined && many === undefined) problem(`${at}: needs url (one server) or urls (a pool)`);
  if (discover && one === undefined) {
    problem(`${at}.discover: needs url, whose host name resolves to the pool's servers`);
  }
  const urls = (many ?? (one === undefined ? [] : [one])).map((value, index) =>
    url(many ? `${at}.urls[${index}]` : `${at}.url`, value),
  );
  urls.forEach((value, index) => {
    if (urls.indexOf(value) !== index) problem(`${at}.urls[${index}]: ${value} is listed twice`);
  });
  return { url: urls[0] ?? '', urls, discover };
}
