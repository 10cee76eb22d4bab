import { Module } from '@nestjs/common';
import { QueueModule } from '../generation/queue.module.js';
import { HistoryController } from './history.controller.js';
import { HistoryService } from './history.service.js';

@Module({
  imports: [QueueModule],
  controllers: [HistoryController],
  providers: [HistoryService],
})
export class HistoryModule {}
