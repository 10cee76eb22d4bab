import { createHash, randomUUID } from 'node:crypto';
import { Inject, Injectable } from '@nestjs/common';
import type { Request, Response } from 'express';
import { count } from '../common/count.js';
import { DomainError } from '../common/problem.js';
import { inputKeysOf, type StoredInput } from '../jobs/history-item.entity.js';
import { JobLifecycle } from '../jobs/job-lifecycle.js';
import { JobWaits } from '../jobs/job-waits.js';
import { INPUT_STORE, inputKey } from '../media/media.js';
import type { ObjectStore } from '../media/object-store.js';
import { JobAcceptedDto, JobFinishedDto } from './generation.dto.js';
import { IdempotencyKeys, type StoredResponse } from './idempotency.js';
import { type CreationBudget, CreationRateLimit, rateLimitHeaders, UserLimits } from './limits.js';
import { UploadParser, type ValidUpload } from './upload.js';

const PENDING_RETRY_AFTER_SECONDS = '5';

@Injectable()
export class GenerationService {
  constructor(
    @Inject(INPUT_STORE) private readonly inputs: ObjectStore,
    private readonly uploads: UploadParser,
    private readonly lifecycle: JobLifecycle,
    private readonly waits: JobWaits,
    private readonly idempotency: IdempotencyKeys,
    private readonly rateLimit: CreationRateLimit,
    private readonly limits: UserLimits,
  ) {}

  /**
   * Validates the upload, records the job and queues it; answers what the client is to receive, with where the user's
   * per-minute budget stands (not part of a stored answer: a replay tells the budget as it is then).
   */
  async create(userId: string, request: Request, response: Response): Promise<StoredResponse> {
    let budget: CreationBudget | undefined;
    const answer = await this.createOnce(userId, request, response, (taken) => (budget = taken));
    budget ??= await this.rateLimit.standing(userId);
    return { ...answer, headers: { ...answer.headers, ...rateLimitHeaders(budget) } };
  }

  private async createOnce(
    userId: string,
    request: Request,
    response: Response,
    onTaken: (budget: CreationBudget) => void,
  ): Promise<StoredResponse> {
    const idempotencyKey = IdempotencyKeys.validate(request.headersDistinct['idempotency-key']);
    await this.rateLimit.check(userId);
    const upload = await this.uploads.parse(request, response);
    let accepted: StoredResponse | undefined;
    try {
      if (!idempotencyKey) return (accepted = await this.accept(userId, upload, onTaken));
      const fingerprint = fingerprintOf(upload);
      const claim = await this.idempotency.claim(userId, idempotencyKey, fingerprint);
      if (claim.kind === 'replay') return claim.response;
      try {
        accepted = await this.accept(userId, upload, onTaken);
        await this.idempotency.complete(claim.key, fingerprint, accepted);
        return accepted;
      } catch (error) {
        await this.idempotency.release(claim.key).catch(() => {});
        throw error;
      }
    } finally {
      // An accepted job's files were moved into the input store; an upload that made no job leaves nothing.
      if (!accepted) await this.uploads.discard(upload);
    }
  }

  /**
   * Holds an accepted job's answer for at most `seconds` (`Prefer: wait`): a job that ends meanwhile is answered 200
   * with its final status, one still pending 202 as before.
   */
  async awaitOutcome(userId: string, answer: StoredResponse, seconds: number): Promise<StoredResponse> {
    const headers = { ...answer.headers, 'Preference-Applied': `wait=${seconds}` };
    const { history_item_id: id } = answer.body as JobAcceptedDto;
    const item = await this.waits.untilFinal(userId, id, seconds * 1000);
    if (!item || item.status === 'pending') return { ...answer, headers };
    return { status: 200, headers, body: JobFinishedDto.of(id, item.status) };
  }

  /** Takes a creation from the user's per-minute budget for the job it records and queues. */
  private async accept(
    userId: string,
    upload: ValidUpload,
    onTaken: (budget: CreationBudget) => void,
  ): Promise<StoredResponse> {
    // Only creations count against the per-minute budget: not refused uploads, not idempotent replays,
    // not the requests the pending limit or a queue outage refuses below.
    const creation = await this.rateLimit.take(userId);
    try {
      const answer = await this.record(userId, upload);
      onTaken(creation.budget);
      return answer;
    } catch (error) {
      // With Redis gone, the creation stays taken until its counter expires: one too few, never one too many.
      await this.rateLimit.refund(creation).catch(() => {});
      throw error;
    }
  }

  /** Stores the inputs privately and hands the item to the lifecycle, which records and queues it. */
  private async record(userId: string, upload: ValidUpload): Promise<StoredResponse> {
    // Read before the inputs are stored: a failure past that point would leave them with no row to remove them by.
    const { maxPending } = await this.limits.of(userId);
    const id = randomUUID();
    const stored: Record<string, StoredInput> = {};
    try {
      for (const [name, image] of Object.entries(upload.images)) {
        const key = inputKey(id, name);
        await this.inputs.putFile(key, image.path);
        stored[name] = { key, format: image.format, width: image.width, height: image.height, bytes: image.bytes };
      }
    } catch (error) {
      await this.inputs.delete(inputKeysOf(stored));
      throw error;
    }
    const item = {
      id,
      userId,
      tool: upload.tool.id,
      generationType: upload.generationType,
      inputs: stored,
      webhookUrl: upload.webhookUrl,
      webhookEvents: upload.webhookEvents,
    };
    if (!(await this.lifecycle.accept({ ...item, texts: upload.texts }, maxPending))) {
      throw new DomainError(
        'too_many_pending',
        `At most ${count(maxPending, 'job')} may be pending at once; wait for some to finish.`,
        { headers: { 'Retry-After': PENDING_RETRY_AFTER_SECONDS } },
      );
    }
    return {
      status: 202,
      headers: { Location: `/user/generation-history/${id}` },
      body: JobAcceptedDto.of(id),
    };
  }
}

/** Same tool, type, texts, webhook and file contents: the same request, whatever the part order or file names. */
function fingerprintOf(upload: ValidUpload): string {
  const images = Object.entries(upload.images)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, image]) => [name, image.sha256]);
  const texts = Object.entries(upload.texts).sort(([a], [b]) => a.localeCompare(b));
  return createHash('sha256')
    .update(
      JSON.stringify({
        tool: upload.tool.id,
        type: upload.generationType,
        images,
        texts,
        webhook: upload.webhookUrl,
        // Absent for the default, so that a key's fingerprint from before webhook_events existed still matches.
        ...(upload.webhookEvents ? { webhookEvents: upload.webhookEvents } : {}),
      }),
    )
    .digest('hex');
}
