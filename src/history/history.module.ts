import { type MiddlewareConsumer, Module, type NestModule, RequestMethod } from '@nestjs/common';
import { json, type NextFunction, type Request, type Response } from 'express';
import { DomainError } from '../common/problem.js';
import { ItemViews } from '../jobs/item-views.js';
import { JobsModule } from '../jobs/jobs.module.js';
import { LimitsModule } from '../users/limits.module.js';
import { HistoryController, UserEventsController } from './history.controller.js';
import { HistoryStreams } from './history-streams.js';
import { HistoryService } from './history.service.js';

/** `is` answers null for a request without a body: that one is told `like` is missing, by validation. */
function requireJsonBody(request: Request, _response: Response, next: NextFunction): void {
  if (request.is('application/json') === false) {
    next(new DomainError('bad_request', 'The request body must be application/json.'));
  } else {
    next();
  }
}

@Module({
  imports: [JobsModule, LimitsModule],
  controllers: [HistoryController, UserEventsController],
  providers: [HistoryService, HistoryStreams, ItemViews],
})
export class HistoryModule implements NestModule {
  /**
   * Feedback is the API's one JSON body, so it is the one route that runs a JSON parser: every other
   * request, the polled item GET above all, skips it. A body of another type is refused before it is read.
   */
  configure(consumer: MiddlewareConsumer): void {
    consumer
      .apply(requireJsonBody, json())
      .forRoutes({ path: 'user/generation-history/feedback/:id', method: RequestMethod.PATCH });
  }
}
