import { type DynamicModule, Global, Module } from '@nestjs/common';
import { Draining, HttpDrain } from './draining.js';

/** {@link Draining} for every role; an API process drains its HTTP server too. */
@Global()
@Module({})
export class DrainingModule {
  static forRole({ api }: { api: boolean }): DynamicModule {
    return {
      module: DrainingModule,
      providers: [Draining, ...(api ? [HttpDrain] : [])],
      exports: [Draining],
    };
  }
}
