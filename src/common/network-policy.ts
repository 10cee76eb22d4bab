import { BlockList, isIP } from 'node:net';

/**
 * Addresses a webhook must not reach unless the operator allows private networks: loopback, private, link-local
 * (cloud metadata services live there), carrier-grade NAT, multicast, reserved and unspecified ranges.
 */
const PRIVATE = new BlockList();
for (const [network, prefix] of [
  ['0.0.0.0', 8],
  ['10.0.0.0', 8],
  ['100.64.0.0', 10],
  ['127.0.0.0', 8],
  ['169.254.0.0', 16],
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['224.0.0.0', 4],
  ['240.0.0.0', 4],
] as const) {
  PRIVATE.addSubnet(network, prefix, 'ipv4');
}
for (const [network, prefix] of [
  ['::', 128],
  ['::1', 128],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const) {
  PRIVATE.addSubnet(network, prefix, 'ipv6');
}

/** Whether an IP address (v4 or v6, IPv4-mapped v6 included) is one a webhook must not reach. */
export function isPrivateAddress(address: string): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return PRIVATE.check(mapped[1], 'ipv4');
  const family = isIP(address);
  if (family === 0) return true;
  return PRIVATE.check(address, family === 4 ? 'ipv4' : 'ipv6');
}

export interface WebhookUrlPolicy {
  allowHttp: boolean;
  allowPrivateNetworks: boolean;
}

/**
 * Why a `webhook_url` is refused at creation, or undefined when it is acceptable. Only what the URL itself says is
 * judged here (a host name is resolved, and the address checked, when a delivery connects).
 */
export function webhookUrlProblem(raw: string, policy: WebhookUrlPolicy): string | undefined {
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return 'must be an absolute URL';
  }
  const schemes = policy.allowHttp ? ['https:', 'http:'] : ['https:'];
  if (!schemes.includes(url.protocol)) return `must be an ${schemes.map((s) => s.slice(0, -1)).join(' or ')} URL`;
  if (url.username || url.password) return 'must not carry credentials';
  if (policy.allowPrivateNetworks) return undefined;
  // A fully qualified name's trailing dot names the same host: `localhost.` is `localhost`.
  const host = url.hostname.replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '');
  if (host === 'localhost' || host.endsWith('.localhost') || (isIP(host) !== 0 && isPrivateAddress(host))) {
    return 'must not name a loopback, private or link-local address';
  }
  return undefined;
}
