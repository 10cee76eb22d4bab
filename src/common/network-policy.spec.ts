import { isPrivateAddress, webhookUrlProblem } from './network-policy.js';

describe('isPrivateAddress', () => {
  it.each([
    '127.0.0.1',
    '10.1.2.3',
    '172.16.0.1',
    '192.168.1.1',
    '169.254.169.254',
    '100.64.0.1',
    '0.0.0.0',
    '224.0.0.1',
    '::1',
    '::',
    'fd00::1',
    'fe80::1',
    '::ffff:127.0.0.1',
    '::ffff:10.0.0.1',
    '::ffff:7f00:1',
    '::127.0.0.1',
    '::ffff:0:7f00:1',
    '64:ff9b::7f00:1',
    '64:ff9b::a00:5',
    '64:ff9b:1::808:808',
    '2002:7f00:1::',
    '2002:a9fe:a9fe::1',
    '2001:0:4136:e378:8000:63bf:3fff:fdd2',
    'fec0::1',
    '100::1',
  ])('refuses %s', (address) => {
    expect(isPrivateAddress(address)).toBe(true);
  });

  it.each(['93.184.216.34', '8.8.8.8', '2606:4700::1111', '::ffff:8.8.8.8', '64:ff9b::808:808', '2002:808:808::1'])(
    'allows %s',
    (address) => {
      expect(isPrivateAddress(address)).toBe(false);
    },
  );
});

describe('webhookUrlProblem', () => {
  const strict = { allowHttp: false, allowPrivateNetworks: false };

  it.each([
    ['not a url', 'must be an absolute URL'],
    ['/relative', 'must be an absolute URL'],
    ['http://hooks.example.com/x', 'must be an https URL'],
    ['ftp://hooks.example.com/x', 'must be an https URL'],
    ['https://user:pw@hooks.example.com/x', 'must not carry credentials'],
    ['https://localhost/x', 'must not name a loopback, private or link-local address'],
    ['https://localhost./x', 'must not name a loopback, private or link-local address'],
    ['https://api.localhost./x', 'must not name a loopback, private or link-local address'],
    ['https://127.0.0.1./x', 'must not name a loopback, private or link-local address'],
    ['https://127.0.0.1:8443/x', 'must not name a loopback, private or link-local address'],
    ['https://[::1]/x', 'must not name a loopback, private or link-local address'],
    ['https://[64:ff9b::a00:5]/x', 'must not name a loopback, private or link-local address'],
    ['https://169.254.169.254/latest/meta-data', 'must not name a loopback, private or link-local address'],
  ])('refuses %s: %s', (url, problem) => {
    expect(webhookUrlProblem(url, strict)).toBe(problem);
  });

  it('takes a public https URL, and http or private addresses only where allowed', () => {
    expect(webhookUrlProblem('https://hooks.example.com/generation?x=1', strict)).toBeUndefined();
    expect(
      webhookUrlProblem('http://127.0.0.1:9000/x', { allowHttp: true, allowPrivateNetworks: true }),
    ).toBeUndefined();
    expect(
      webhookUrlProblem('http://hooks.example.com/x', { allowHttp: true, allowPrivateNetworks: false }),
    ).toBeUndefined();
  });
});
