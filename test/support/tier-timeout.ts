import { jest } from '@jest/globals';

/**
 * Tiers above unit start real servers and processes: their hooks and tests get a minute by default (a busy machine
 * takes longer to start a service or run promtool, and a test that hangs still fails); where a test needs more it says
 * so. Set here because Jest reads `testTimeout` from the command line's configuration only, never from a project's.
 */
jest.setTimeout(60_000);
