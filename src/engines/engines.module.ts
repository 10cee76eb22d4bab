import { Module } from '@nestjs/common';
import { EngineRegistry } from './engine-registry.js';

/** The engines as the service runs them: the worker's jobs, and the API's readiness report of the model servers. */
@Module({ providers: [EngineRegistry], exports: [EngineRegistry] })
export class EnginesModule {}
