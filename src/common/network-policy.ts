import { lookup as dnsLookup, type LookupAddress } from 'node:dns';
import { BlockList, isIP, type LookupFunction } from 'node:net';

/**
 * Addresses a webhook must not reach unless the operator allows private networks, nor a model's output not on its
 * server's own origin: loopback, private, link-local
 * (cloud metadata services live there), carrier-grade NAT, multicast, reserved and unspecified ranges, and the IPv6
 * addresses that carry one of those IPv4 addresses (BlockList itself checks IPv4-mapped ones against the IPv4 rules).
 */
const PRIVATE = new BlockList();
/**
 * IPv6 prefixes whose last 32 bits are an IPv4 address: IPv4-compatible (RFC 4291), IPv4-translated (RFC 6145) and
 * NAT64's well-known prefix (RFC 6052), which a network with NAT64 routes to that IPv4 address.
 */
const EMBEDDING_PREFIXES = ['::', '::ffff:0:', '64:ff9b::'];
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
  for (const embedding of EMBEDDING_PREFIXES) PRIVATE.addSubnet(`${embedding}${network}`, 96 + prefix, 'ipv6');
  PRIVATE.addSubnet(sixToFour(network), 16 + prefix, 'ipv6');
}
for (const [network, prefix] of [
  ['::', 128],
  ['::1', 128],
  // Discard-only, Teredo (its IPv4 addresses are obscured), documentation, NAT64 for local use, site-local.
  ['100::', 64],
  ['2001::', 32],
  ['2001:db8::', 32],
  ['64:ff9b:1::', 48],
  ['fec0::', 10],
  ['fc00::', 7],
  ['fe80::', 10],
  ['ff00::', 8],
] as const) {
  PRIVATE.addSubnet(network, prefix, 'ipv6');
}

/** The 6to4 (RFC 3056) prefix of an IPv4 address: `2002:` and the address's 32 bits, which relays route to it. */
function sixToFour(ipv4: string): string {
  const [a, b, c, d] = ipv4.split('.').map(Number);
  return `2002:${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}::`;
}

/** Whether an IP address (v4 or v6, IPv4-mapped v6 included) is one of those above. */
export function isPrivateAddress(address: string): boolean {
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (mapped) return PRIVATE.check(mapped[1], 'ipv4');
  const family = isIP(address);
  if (family === 0) return true;
  return PRIVATE.check(address, family === 4 ? 'ipv4' : 'ipv6');
}

/** A connection refused because its host is, or resolves to, an address of the kinds above. */
export class RefusedAddress extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'RefusedAddress';
  }
}

/**
 * Resolves like `dns.lookup` and refuses private addresses: the check is on the address the socket then connects to,
 * so a name that resolves to a private address, now or after a DNS change, is refused too. An address written in the
 * URL is connected to without a lookup: check it with `isPrivateAddress` first.
 */
export const publicOnlyLookup: LookupFunction = (hostname, options, callback) => {
  dnsLookup(hostname, { ...options, all: true }, (error, addresses: LookupAddress[]) => {
    if (error) return callback(error, '', 4);
    const refused = addresses.find((entry) => isPrivateAddress(entry.address));
    if (refused) return callback(new RefusedAddress(`${hostname} resolves to ${refused.address}`), '', 4);
    if (options.all) return (callback as unknown as (e: null, a: LookupAddress[]) => void)(null, addresses);
    callback(null, addresses[0].address, addresses[0].family);
  });
};

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
