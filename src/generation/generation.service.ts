import { createHash, randomUUID } from 'node:crypto';
import { Inject, Injectable, Logger } from '@nestjs/common';
import type { Request, Response } from 'express';
import { count } from '../common/count.js';
import { DomainError } from '../common/problem.js';
import { inputKeysOf, type StoredInput } from '../jobs/history-item.entity.js';
import { JobLifecycle } from '../jobs/job-lifecycle.js';
import { JobWaits } from '../jobs/job-waits.js';
import { INPUT_STORE, inputKey } from '../media/media.js';
import { MediaUrls } from '../media/media-urls.js';
import type { ObjectStore } from '../media/object-store.js';
import { JobAcceptedDto, JobFinishedDto } from './generation.dto.js';
import { acceptedAnswer, IdempotencyKeys, type StoredResponse } from './idempotency.js';
import { FairShare } from '../users/fair-share.js';
import { UserLimits } from '../users/user-limits.js';
import { JsonJobs } from './json-jobs.js';
import { type CreationBudget, CreationRateLimit, rateLimitHeaders } from './limits.js';
import { UploadParser, type ValidUpload } from './upload.js';

const PENDING_RETRY_AFTER_SECONDS = '5';

@Injectable()
export class GenerationService {
  private readonly logger = new Logger(GenerationService.name);

  constructor(
    @Inject(INPUT_STORE) private readonly inputs: ObjectStore,
    private readonly uploads: UploadParser,
    private readonly lifecycle: JobLifecycle,
    private readonly waits: JobWaits,
    private readonly idempotency: IdempotencyKeys,
    private readonly rateLimit: CreationRateLimit,
    private readonly limits: UserLimits,
    private readonly fairShare: FairShare,
    private readonly jsonJobs: JsonJobs,
    private readonly mediaUrls: MediaUrls,
  ) {}

  /**
   * Validates the job (a multipart upload, or JSON naming its images by URL or stored file), records it and queues it;
   * answers what the client is to receive, with where the user's per-minute budget stands (not part of a stored
   * answer: a replay tells the budget as it is then).
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
    // Taken before the first byte of the body is read (or of an image URL fetched), and given back once all of it is.
    const uploading = await this.fairShare.take(userId, 'uploads', response);
    const upload = await (
      request.is('application/json')
        ? this.jsonJobs.read(userId, request.body, { hash: idempotencyKey !== undefined })
        : this.uploads.parse(request, response)
    ).finally(uploading);
    let accepted: StoredResponse | undefined;
    try {
      if (!idempotencyKey) return (accepted = await this.accept(userId, upload, onTaken));
      const fingerprint = fingerprintOf(upload);
      const claim = await this.idempotency.claim(userId, idempotencyKey, fingerprint);
      if (claim.kind === 'replay') return claim.response;
      try {
        accepted = await this.accept(userId, upload, onTaken, claim.id);
      } catch (error) {
        await this.idempotency.release(userId, claim).catch(() => {});
        throw error;
      }
      // The job is accepted and queued: its key stays taken whatever happens now, and a repeat that finds no stored
      // answer is answered from the claim's item.
      await this.idempotency.complete(claim.key, fingerprint, accepted).catch((error: unknown) => {
        this.logger.warn({ err: error, id: claim.id }, 'could not store the answer of an idempotent creation');
      });
      return accepted;
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
    return { status: 200, headers, body: JobFinishedDto.of(id, item.status, this.mediaUrls.forItem(id, Date.now())) };
  }

  /** Takes a creation from the user's per-minute budget for the job it records and queues. */
  private async accept(
    userId: string,
    upload: ValidUpload,
    onTaken: (budget: CreationBudget) => void,
    id: string = randomUUID(),
  ): Promise<StoredResponse> {
    // Only creations count against the per-minute budget: not refused uploads, not idempotent replays,
    // not the requests the pending limit or a queue outage refuses below.
    const creation = await this.rateLimit.take(userId);
    try {
      const answer = await this.record(userId, upload, id);
      onTaken(creation.budget);
      return answer;
    } catch (error) {
      // With Redis gone, the creation stays taken until its counter expires: one too few, never one too many.
      await this.rateLimit.refund(creation).catch(() => {});
      throw error;
    }
  }

  /** Stores the inputs privately and hands the item `id` to the lifecycle, which records and queues it. */
  private async record(userId: string, upload: ValidUpload, id: string): Promise<StoredResponse> {
    // Read before the inputs are stored: a failure past that point would leave them with no row to remove them by.
    const { maxPending } = await this.limits.of(userId);
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
      seed: upload.seed ?? null,
      numOutputs: upload.numOutputs,
    };
    if (!(await this.lifecycle.accept({ ...item, texts: upload.texts }, maxPending))) {
      throw new DomainError(
        'too_many_pending',
        `At most ${count(maxPending, 'job')} may be pending at once; wait for some to finish.`,
        { headers: { 'Retry-After': PENDING_RETRY_AFTER_SECONDS } },
      );
    }
    return acceptedAnswer(id, this.mediaUrls.forItem(id, Date.now()));
  }
}

/**
 * Same tool, type, texts, webhook and file contents: the same request, whatever the part order or file names. A stored
 * file's id stands for its bytes, which never change.
 */
function fingerprintOf(upload: ValidUpload): string {
  const images = Object.entries(upload.images)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([name, image]) => [name, image.fileId === undefined ? image.sha256 : `file:${image.fileId}`]);
  const texts = Object.entries(upload.texts).sort(([a], [b]) => a.localeCompare(b));
  return createHash('sha256')
    .update(
      JSON.stringify({
        tool: upload.tool.id,
        type: upload.generationType,
        images,
        texts,
        webhook: upload.webhookUrl,
        // Left out when not asked for, so that keys claimed before these fields existed still match.
        ...(upload.webhookEvents ? { webhookEvents: upload.webhookEvents } : {}),
        seed: upload.seed,
        outputs: upload.numOutputs > 1 ? upload.numOutputs : undefined,
      }),
    )
    .digest('hex');
}
