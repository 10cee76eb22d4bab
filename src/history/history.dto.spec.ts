import 'reflect-metadata';
import type { ArgumentMetadata } from '@nestjs/common';
import { DomainError } from '../common/problem.js';
import { validationPipe } from '../common/validation.js';
import { FeedbackDto, HistoryListQueryDto } from './history.dto.js';

const query: ArgumentMetadata = { type: 'query', metatype: HistoryListQueryDto };
const body: ArgumentMetadata = { type: 'body', metatype: FeedbackDto };

/** What the pipe refuses a value with: the problem's code and its field errors. */
async function refusal(value: unknown, metadata: ArgumentMetadata) {
  const error = await validationPipe()
    .transform(value, metadata)
    .then(
      () => undefined,
      (thrown: unknown) => thrown,
    );
  if (!(error instanceof DomainError)) throw new Error(`not refused with a DomainError: ${String(error)}`);
  return { code: error.code, detail: error.detail, errors: error.options.errors };
}

describe('HistoryListQueryDto through the validation pipe', () => {
  it('turns whole numbers as written into numbers, and keeps what is absent absent', async () => {
    const sut = validationPipe();

    expect(await sut.transform({ page: '3', limit: '100', status: 'error' }, query)).toEqual({
      page: 3,
      limit: 100,
      status: 'error',
    });
    expect(await sut.transform({}, query)).toEqual({});
  });

  it.each([
    [{ page: '1e1' }, 'page', 'an integer of at least 1'],
    [{ page: ['1', '2'] }, 'page', 'an integer of at least 1'],
    [{ limit: '101' }, 'limit', 'an integer from 1 to 100'],
    [{ status: 'COMPLETE' }, 'status', 'must be one of pending, complete, error'],
    [
      { generation_type: 'Fashion-Swap' },
      'generation_type',
      'must be a generation type id from GET /generation/generationTypes',
    ],
  ])('refuses %j naming %s', async (value, field, message) => {
    expect(await refusal(value, query)).toEqual({
      code: 'validation_failed',
      detail: `Invalid ${field}: ${message}.`,
      errors: [{ field, message }],
    });
  });
});

describe('FeedbackDto through the validation pipe', () => {
  it.each([{ like: true }, { like: false }, { like: null }])('takes %j', async (value) => {
    expect(await validationPipe().transform(value, body)).toEqual(value);
  });

  it.each([[{ like: true, comment: 'x' }], [{ like: 'yes' }], [{}], [[{ like: false }]], ['like']])(
    'refuses %j naming like',
    async (value) => {
      expect((await refusal(value, body)).errors).toEqual([
        { field: 'like', message: 'the body must be {"like": true, false or null} and nothing else' },
      ]);
    },
  );
});
