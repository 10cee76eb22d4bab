import { rm } from 'node:fs/promises';
import { Injectable } from '@nestjs/common';
import { DomainError } from '../common/problem.js';
import { LiveRouting } from '../config/live-routing.js';
import { StoredFiles } from '../files/stored-files.js';
import { imageSourceOf, jsonJobParts } from './job-json.js';
import { checkToolForm, checkVariants } from './job-form.js';
import { type UploadedImage, UploadParser, type ValidUpload } from './upload.js';
import { UrlInputs } from './url-inputs.js';

/**
 * Reads a job sent as `application/json`: the same form checks as a multipart job, then each image input's bytes
 * fetched from its URL or copied from the user's stored file into a temporary file, and checked as an upload's are.
 * The result is a job upload like any other: the rest of creation does not know how its images came.
 */
@Injectable()
export class JsonJobs {
  constructor(
    private readonly uploads: UploadParser,
    private readonly urls: UrlInputs,
    private readonly files: StoredFiles,
    private readonly routing: LiveRouting,
  ) {}

  /** Checks and gathers; on any failure every temporary file is already gone. */
  async read(userId: string, body: unknown, options: { hash: boolean }): Promise<ValidUpload> {
    const { catalog } = this.routing.current;
    const { parts, imageValues } = jsonJobParts(body, catalog);
    const form = checkToolForm(parts, catalog);
    checkVariants(form, this.routing.current.engineRouting);
    const webhookUrl = this.uploads.webhookUrlOf(form.webhookUrl);
    const sources = form.images.map((name) => [name, imageSourceOf(name, imageValues.get(name)!)] as const);
    // All at once: a job's inputs are usually on the same server, and the slowest sets the pace. The first to fail
    // stops the fetches still going: the job is refused whatever they bring.
    const abandon = new AbortController();
    // The first failure in time: those after it may be only the abandoned fetches'.
    let firstFailure: { error: unknown } | undefined;
    const results = await Promise.allSettled(
      sources.map(([name, source]) =>
        (source.kind === 'url'
          ? this.fetched(name, source.url, { hash: options.hash, abandon: abandon.signal })
          : this.copied(userId, name, source.fileId)
        ).catch((error: unknown) => {
          firstFailure ??= { error };
          abandon.abort();
          throw error;
        }),
      ),
    );
    if (firstFailure) {
      const gathered = results.flatMap((result) => (result.status === 'fulfilled' ? [result.value.path] : []));
      await Promise.all(gathered.map((path) => rm(path, { force: true })));
      throw firstFailure.error;
    }
    const images: Record<string, UploadedImage> = {};
    sources.forEach(
      ([name], index) => (images[name] = (results[index] as PromiseFulfilledResult<UploadedImage>).value),
    );
    const { tool, generationType, texts, webhookEvents, seed, numOutputs } = form;
    return { tool, generationType, images, texts, webhookUrl, webhookEvents, seed, numOutputs };
  }

  private async fetched(
    name: string,
    url: string,
    options: { hash: boolean; abandon: AbortSignal },
  ): Promise<UploadedImage> {
    const file = await this.urls.fetch(name, url, options);
    try {
      return await this.uploads.inspectImage(name, file);
    } catch (error) {
      await rm(file.path, { force: true });
      throw error;
    } finally {
      file.probe.release();
    }
  }

  private async copied(userId: string, name: string, fileId: string): Promise<UploadedImage> {
    const copy = await this.files.copyOut(userId, fileId);
    if (!copy) {
      // Another user's file is answered as one that does not exist: nothing tells the two apart.
      throw new DomainError('not_found', `The input "${name}" names no stored file of yours: ${fileId}.`, {
        errors: [{ field: name, message: 'no such file (or it expired)' }],
      });
    }
    return { ...copy, fileId };
  }
}
