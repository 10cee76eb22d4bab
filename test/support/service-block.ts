import { createTestEnvironment, type TestEnvironment } from './environment.js';
import { type RunningService, startService } from './service.js';

/**
 * The test environment of one `describe` block and the built service started on it, made by `serviceForBlock`. They
 * exist once the block's `beforeAll` hooks have begun; reading one earlier throws.
 */
export class ServiceBlock {
  private environment?: TestEnvironment;
  private service?: RunningService;

  get env(): TestEnvironment {
    if (!this.environment) throw new Error('the environment of this block is read before its beforeAll created it');
    return this.environment;
  }

  get sut(): RunningService {
    if (!this.service) throw new Error('the service of this block is read before its beforeAll started it');
    return this.service;
  }

  async setUp(settings: Record<string, string>): Promise<void> {
    this.environment = await createTestEnvironment();
    this.service = await startService({ ...this.environment.serviceEnv, ...settings });
  }

  async tearDown(): Promise<void> {
    await this.service?.stop();
    await this.environment?.dispose();
  }
}

/**
 * Sets up, for the enclosing `describe` block, a test environment and the service on it with `settings` added to the
 * environment's: a `beforeAll`, registered before the block's own, starts them; an `afterAll` stops and removes them.
 */
export function serviceForBlock(settings: Record<string, string> = {}): ServiceBlock {
  const block = new ServiceBlock();
  beforeAll(() => block.setUp(settings), 60_000);
  afterAll(() => block.tearDown(), 60_000);
  return block;
}
