// Headless Chromium from Debian's package (`apt-get install chromium`; `.ci/run` installs it), driven by
// playwright-core, which downloads no browser of its own. Plain JavaScript, so the benchmarks use it as the tests do.
// The flags keep Chromium off the network it would otherwise call at start (refused on a closed network).
import { chromium } from 'playwright-core';

export function launchBrowser() {
  return chromium.launch({
    executablePath: '/usr/bin/chromium',
    headless: true,
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
}
