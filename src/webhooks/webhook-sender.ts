import http from 'node:http';
import https from 'node:https';
import { isIP } from 'node:net';
import { isPrivateAddress, publicOnlyLookup, RefusedAddress } from '../common/network-policy.js';

/** What one POST to a receiver came to. */
export type SendResult =
  | { kind: 'answered'; status: number }
  /** The destination is a private address and those are not allowed: sending again changes nothing. */
  | { kind: 'refused'; reason: string }
  /** No answer: refused or dropped connection, DNS failure, timeout. */
  | { kind: 'unreachable'; reason: string };

/**
 * POSTs a JSON body and resolves with the status, never following a redirect (Node's client does not) and never
 * waiting longer than `timeoutMs` for the whole exchange. The answer's body is not read beyond draining it.
 */
export function postJson(
  url: string,
  headers: Record<string, string>,
  body: string,
  options: { timeoutMs: number; allowPrivateNetworks: boolean },
): Promise<SendResult> {
  const target = new URL(url);
  const host = target.hostname.replace(/^\[(.*)\]$/, '$1');
  // An address in the URL is connected to without a lookup: it is checked here instead.
  if (!options.allowPrivateNetworks && isIP(host) !== 0 && isPrivateAddress(host)) {
    return Promise.resolve({ kind: 'refused', reason: `${host} is a private address` });
  }
  const client = target.protocol === 'https:' ? https : http;
  return new Promise((resolve) => {
    const request = client.request(
      target,
      {
        method: 'POST',
        headers: { ...headers, 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) },
        lookup: options.allowPrivateNetworks ? undefined : publicOnlyLookup,
        signal: AbortSignal.timeout(options.timeoutMs),
      },
      (response) => {
        response.resume();
        response.once('end', () => resolve({ kind: 'answered', status: response.statusCode ?? 0 }));
        response.once('error', () => resolve({ kind: 'answered', status: response.statusCode ?? 0 }));
      },
    );
    request.once('error', (error) => {
      if (error instanceof RefusedAddress) resolve({ kind: 'refused', reason: error.message });
      else resolve({ kind: 'unreachable', reason: (error as NodeJS.ErrnoException).code ?? error.name });
    });
    request.end(body);
  });
}
