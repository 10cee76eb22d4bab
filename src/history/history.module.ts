import { type MiddlewareConsumer, Module, type NestModule, RequestMethod } from '@nestjs/common';
import { json } from 'express';
import { JobsModule } from '../jobs/jobs.module.js';
import { HistoryController, UserEventsController } from './history.controller.js';
import { HistoryStreams } from './history-streams.js';
import { HistoryService } from './history.service.js';

@Module({
  imports: [JobsModule],
  controllers: [HistoryController, UserEventsController],
  providers: [HistoryService, HistoryStreams],
})
export class HistoryModule implements NestModule {
  /**
   * Feedback is the API's one JSON body, so it is the one route that runs a JSON parser: every other
   * request, the polled item GET above all, skips it.
   */
  configure(consumer: MiddlewareConsumer): void {
    consumer.apply(json()).forRoutes({ path: 'user/generation-history/feedback/:id', method: RequestMethod.PATCH });
  }
}
