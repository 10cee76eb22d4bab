import { Module } from '@nestjs/common';
import { TerminusModule } from '@nestjs/terminus';
import { EnginesModule } from '../engines/index.js';
import { HealthController } from './health.controller.js';

@Module({
  imports: [TerminusModule.forRoot({ logger: false }), EnginesModule],
  controllers: [HealthController],
})
export class HealthModule {}
