import { InjectQueue } from '@nestjs/bull';
import { Injectable } from '@nestjs/common';
import type { Queue } from 'bull';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { GENERATE_JOB, type GenerateJobData, GENERATION_QUEUE, generateJobOptions } from './generation.queue.js';

/** Redis that does not answer within this long counts as down: the client gets 503, not a hang. */
const ENQUEUE_TIMEOUT_MS = 1500;

@Injectable()
export class GenerationProducer {
  constructor(
    @InjectQueue(GENERATION_QUEUE) private readonly queue: Queue<GenerateJobData>,
    private readonly config: AppConfig,
  ) {}

  async enqueue(historyItemId: string): Promise<void> {
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error('enqueue timed out')), ENQUEUE_TIMEOUT_MS);
    });
    try {
      await Promise.race([
        this.queue.add(GENERATE_JOB, { historyItemId }, generateJobOptions(this.config, historyItemId)),
        timeout,
      ]);
    } catch {
      throw new DomainError('service_unavailable', 'The job queue is unavailable; retry shortly.', {
        headers: { 'Retry-After': '5' },
      });
    } finally {
      clearTimeout(timer);
    }
  }
}
