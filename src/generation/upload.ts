import { rm } from 'node:fs/promises';
import { Injectable } from '@nestjs/common';
import type { Request, Response } from 'express';
import multer, { MulterError } from 'multer';
import sharp, { type Metadata } from 'sharp';
import type { CatalogTool } from '../catalog/catalog.js';
import { type ImageFormat, imageFormatOf } from '../common/image-format.js';
import { webhookUrlProblem } from '../common/network-policy.js';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { LiveRouting } from '../config/live-routing.js';
import type { WebhookEventName } from '../jobs/history-item.entity.js';
import { checkFormContentType, checkToolForm, checkVariants, unexpectedField } from './job-form.js';
import { type ProbedFile, ProbingTemporaryFiles, UploadStorageError } from './upload-storage.js';

export interface UploadedImage {
  /** The upload's temporary file; moved into the input store once the job is accepted. */
  path: string;
  format: ImageFormat;
  width: number;
  height: number;
  bytes: number;
  /** SHA-256 of the file (hex), when the request has an Idempotency-Key: part of its fingerprint. */
  sha256?: string;
  /** The stored file (`POST /files`) it is a copy of: its id stands for its bytes in the fingerprint. */
  fileId?: string;
}

/** A file received to a temporary path, seen by a probe on its way there: an upload's part or a fetched URL's body. */
export type ReceivedFile = Pick<ProbedFile, 'path' | 'size' | 'probe'>;

/** A job request that passed every check: the tool, its type and exactly the tool's inputs. */
export interface ValidUpload {
  tool: CatalogTool;
  generationType: string;
  images: Record<string, UploadedImage>;
  texts: Record<string, string>;
  /** Where the final state is to be POSTed, if the client asked for a webhook. */
  webhookUrl: string | null;
  /** The webhook messages asked for beside the final state's (`webhook_events`); null: that one alone. */
  webhookEvents: WebhookEventName[] | null;
  /** The seed asked for; undefined: drawn, when the route takes one. */
  seed: number | undefined;
  numOutputs: number;
}

const FIELD_NAME_MAX_BYTES = 100;
const WEBHOOK_URL_MAX_CHARS = 2048;
const WEBHOOK_URL_TOO_LONG = `must be at most ${WEBHOOK_URL_MAX_CHARS} characters`;
/** `prompt` is at most 1000 characters, i.e. at most 4000 bytes of UTF-8. */
const FIELD_VALUE_MAX_BYTES = 4000;

/**
 * Reads `multipart/form-data` job requests to temporary files on disk (never whole requests in memory)
 * and validates them against the catalog and the image limits.
 */
@Injectable()
export class UploadParser {
  private readonly multer: ReturnType<typeof multer>;

  constructor(
    private readonly config: AppConfig,
    private readonly routing: LiveRouting,
  ) {
    this.multer = multer({
      storage: new ProbingTemporaryFiles(config.uploadTmpDir),
      // Browsers and curl send a field's name and file name as UTF-8 bytes, without RFC 2231's charset marker.
      defParamCharset: 'utf8',
      limits: {
        fileSize: config.uploadMaxFileBytes,
        parts: config.uploadMaxParts,
        files: config.uploadMaxParts,
        fields: config.uploadMaxParts,
        fieldNameSize: FIELD_NAME_MAX_BYTES,
        fieldSize: FIELD_VALUE_MAX_BYTES,
        headerPairs: 20,
        // Field names are taken literally: no tool has a bracketed field, and multer would otherwise turn
        // `prompt[x]` into a nested object under `prompt` (which then fails as a 500, not a 400).
        fieldNestingDepth: 0,
      },
    });
  }

  /** Parses and validates; on any failure the temporary files are already gone. */
  async parse(request: Request, response: Response): Promise<ValidUpload> {
    checkFormContentType(request.headers['content-type']);
    await this.receive(request, response);
    const files = (request.files as Express.Multer.File[] | undefined) ?? [];
    try {
      return await this.validate(request.body as Record<string, unknown>, files);
    } catch (error) {
      await discard(files);
      throw error;
    } finally {
      for (const file of files) (file as ProbedFile).probe.release();
    }
  }

  /** Removes the temporary files of an upload that was not accepted after all. */
  async discard(upload: Pick<ValidUpload, 'images'>): Promise<void> {
    await Promise.all(Object.values(upload.images).map((image) => rm(image.path, { force: true })));
  }

  private receive(request: Request, response: Response): Promise<void> {
    return new Promise((resolve, reject) => {
      this.multer.any()(request, response, (error: unknown) => {
        if (!error) return resolve();
        // multer removes the files it wrote when it fails; nothing is left to clean. A failure to store the
        // upload is the service's, not the client's: it is not mapped to a 4xx.
        reject(error instanceof UploadStorageError ? error : multipartError(error, this.config));
      });
    });
  }

  private async validate(body: Record<string, unknown>, files: Express.Multer.File[]): Promise<ValidUpload> {
    const form = checkToolForm(
      {
        // multer gathers a text field sent more than once into an array: each value is a part of its own.
        texts: Object.entries(body ?? {}).flatMap(([name, value]) =>
          (Array.isArray(value) ? value : [value]).map((text) => [name, String(text)] as const),
        ),
        files: files.map((file) => file.fieldname),
      },
      this.routing.current.catalog,
    );
    checkVariants(form, this.routing.current.engineRouting);
    const { tool, generationType, texts, webhookEvents, seed, numOutputs } = form;
    const webhookUrl = this.webhookUrlOf(form.webhookUrl);

    const images: Record<string, UploadedImage> = {};
    for (const name of form.images) {
      const file = files.find((candidate) => candidate.fieldname === name) as ProbedFile;
      images[name] = await this.inspectImage(name, file);
    }
    return { tool, generationType, images, texts, webhookUrl, webhookEvents, seed, numOutputs };
  }

  /** The job's webhook URL as it is kept, or null for none; a URL the webhooks' rules refuse is a 422. */
  webhookUrlOf(webhook: string | undefined): string | null {
    if (webhook === undefined) return null;
    const problem = this.webhookUrlProblem(webhook);
    if (problem) throw invalidWebhookUrl(problem);
    // Kept as the URL standard writes it: an international host name in its ASCII form, as a URI must be.
    return new URL(webhook).href;
  }

  /**
   * Reads `POST /files`: one part, `file`, an image checked as a job's are. The same reception as a job's upload, so
   * whatever bounds uploads in progress (a per-user cap of concurrent uploads) bounds this one alike.
   */
  async parseFile(request: Request, response: Response): Promise<UploadedImage> {
    checkFormContentType(request.headers['content-type']);
    await this.receive(request, response);
    const files = (request.files as Express.Multer.File[] | undefined) ?? [];
    try {
      const [extra] = [
        ...Object.keys((request.body as Record<string, unknown>) ?? {}),
        ...files.map((f) => f.fieldname),
      ].filter((name) => name !== 'file');
      if (extra !== undefined) throw unexpectedField(extra, 'is not a field of a stored file; send only "file"');
      if (files.length > 1) throw unexpectedField('file', 'sent more than once');
      if (files.length === 0) {
        throw new DomainError('validation_failed', 'The form field "file" is required.', {
          errors: [{ field: 'file', message: 'required: the image to store' }],
        });
      }
      return await this.inspectImage('file', files[0] as ProbedFile);
    } catch (error) {
      await discard(files);
      throw error;
    } finally {
      for (const file of files) (file as ProbedFile).probe.release();
    }
  }

  private webhookUrlProblem(url: string): string | undefined {
    if (url.length > WEBHOOK_URL_MAX_CHARS) return WEBHOOK_URL_TOO_LONG;
    const problem = webhookUrlProblem(url, {
      allowHttp: this.config.webhookAllowHttp,
      allowPrivateNetworks: this.config.webhookAllowPrivateNetworks,
    });
    if (problem) return problem;
    if (new URL(url).href.length > WEBHOOK_URL_MAX_CHARS) return `${WEBHOOK_URL_TOO_LONG} once encoded`;
    return undefined;
  }

  /**
   * Identifies the file by its bytes and reads its size from the header alone: nothing is decoded here,
   * so a decompression bomb costs a header read.
   */
  async inspectImage(field: string, file: ReceivedFile): Promise<UploadedImage> {
    const { probe } = file;
    const format = formatOf(probe.head, probe.tail, file.size);
    if (!format) {
      throw new DomainError(
        'unsupported_media_type',
        `"${field}" is not a complete JPEG, PNG or WebP image (judged by its bytes).`,
        { errors: [{ field, message: 'not a complete JPEG, PNG or WebP image' }] },
      );
    }
    let width: number | undefined;
    let height: number | undefined;
    try {
      ({ width, height } = await headerOf(file, format));
    } catch {
      width = undefined;
    }
    if (!width || !height) {
      throw new DomainError('unsupported_media_type', `"${field}" has an unreadable ${format} header.`, {
        errors: [{ field, message: 'unreadable image header' }],
      });
    }
    const { imageMinSide, imageMaxSide, imageMaxPixels } = this.config;
    if (width < imageMinSide || height < imageMinSide) {
      throw new DomainError(
        'image_too_small',
        `"${field}" is ${width}x${height} px; each side must be at least ${imageMinSide} px.`,
        { errors: [{ field, message: `each side at least ${imageMinSide} px` }] },
      );
    }
    if (width > imageMaxSide || height > imageMaxSide || width * height > imageMaxPixels) {
      throw new DomainError(
        'image_too_large',
        `"${field}" is ${width}x${height} px; each side may be at most ${imageMaxSide} px ` +
          `and the image at most ${imageMaxPixels / 1_000_000} megapixels.`,
        { errors: [{ field, message: `at most ${imageMaxSide} px a side and ${imageMaxPixels} pixels` }] },
      );
    }
    return { path: file.path, format, width, height, bytes: file.size, sha256: probe.hash?.digest('hex') };
  }
}

/**
 * The image's header, read from the bytes the probe kept where they hold it. Given a file, libvips finds
 * its format by letting each of its loaders open and probe it: some thirty system calls an image. A WebP
 * is only parsed whole, and a JPEG's or PNG's metadata may outgrow the kept bytes: then the file is read.
 */
async function headerOf(file: ReceivedFile, format: ImageFormat): Promise<Metadata> {
  const { head } = file.probe;
  if (format !== 'webp' || head.length === file.size) {
    const fromHead = await sharp(head, { limitInputPixels: false })
      .metadata()
      .catch(() => undefined);
    if (fromHead?.width && fromHead.height) return fromHead;
  }
  return sharp(file.path, { limitInputPixels: false }).metadata();
}

/** The fewest bytes that can tell a JPEG, PNG or WebP apart. */
const MAGIC_BYTES = 16;

const PNG_END = Buffer.from([0x49, 0x45, 0x4e, 0x44, 0xae, 0x42, 0x60, 0x82]);

/**
 * The format by magic bytes, and only when the file is whole: a PNG must end with its IEND chunk, a JPEG
 * with its end-of-image marker, a WebP must be as long as its RIFF header says. A cut-off upload is
 * refused here instead of failing later in a worker.
 */
export function formatOf(head: Buffer, tail: Buffer, size: number): ImageFormat | undefined {
  if (size < MAGIC_BYTES) return undefined;
  const format = imageFormatOf(head);
  if (format === 'png') return tail.subarray(tail.length - 8).equals(PNG_END) ? 'png' : undefined;
  if (format === 'jpeg') {
    // Some cameras pad after the end-of-image marker; look for it near the end.
    for (let i = tail.length - 2; i >= 0; i--) if (tail[i] === 0xff && tail[i + 1] === 0xd9) return 'jpeg';
    return undefined;
  }
  if (format === 'webp') return head.readUInt32LE(4) + 8 <= size ? 'webp' : undefined;
  return undefined;
}

function multipartError(error: unknown, config: AppConfig): DomainError {
  if (error instanceof MulterError) {
    // A bracketed field name (see `fieldNestingDepth`); @types/multer does not know this multer 2.5 code yet.
    if ((error.code as string) === 'LIMIT_FIELD_NESTING') {
      return unexpectedField(error.field ?? 'field', 'is not a field of any tool');
    }
    switch (error.code) {
      case 'LIMIT_FILE_SIZE':
        return new DomainError(
          'payload_too_large',
          `"${error.field}" is larger than ${config.uploadMaxFileBytes} bytes.`,
          { errors: [{ field: error.field ?? 'file', message: `at most ${config.uploadMaxFileBytes} bytes` }] },
        );
      case 'LIMIT_PART_COUNT':
      case 'LIMIT_FILE_COUNT':
      case 'LIMIT_FIELD_COUNT':
        return new DomainError('payload_too_large', `At most ${config.uploadMaxParts} parts per request.`);
      case 'LIMIT_FIELD_VALUE':
        if (error.field === 'webhook_url') return invalidWebhookUrl(WEBHOOK_URL_TOO_LONG);
        return new DomainError('validation_failed', `The field "${error.field}" is too long.`, {
          errors: [{ field: error.field ?? 'field', message: 'too long' }],
        });
      default:
        return new DomainError('unexpected_field', 'The form has a field that is not accepted.');
    }
  }
  return new DomainError('malformed_multipart', 'The multipart body is malformed or incomplete.');
}

function invalidWebhookUrl(problem: string): DomainError {
  return new DomainError('invalid_webhook_url', `Invalid webhook_url: it ${problem}.`, {
    errors: [{ field: 'webhook_url', message: problem }],
  });
}

async function discard(files: Express.Multer.File[]): Promise<void> {
  await Promise.all(files.map((file) => rm(file.path, { force: true })));
}
