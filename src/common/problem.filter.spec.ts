import { BadRequestException, NotFoundException } from '@nestjs/common';
import { toDomainError } from './problem.filter.js';

/** What body-parser (through Express) throws: an Error with a status and a type. */
function parserError(status: number, type: string): Error {
  return Object.assign(new Error(`body-parser: ${type}`), { status, statusCode: status, type, expose: true });
}

describe('toDomainError', () => {
  it.each([
    ['an unsupported charset', parserError(415, 'charset.unsupported')],
    ['an unsupported Content-Encoding', parserError(415, 'encoding.unsupported')],
  ])('answers %s of a body with 400 bad_request, not 415 (which means "not an image")', (_case, exception) => {
    const sut = toDomainError(exception);

    expect(sut.status).toBe(400);
    expect(sut.code).toBe('bad_request');
  });

  it('names unparsable JSON', () => {
    const sut = toDomainError(
      new BadRequestException('Unexpected token', { cause: parserError(400, 'entity.parse.failed') }),
    );

    expect(sut.code).toBe('bad_request');
    expect(sut.detail).toBe('The request body is not valid JSON.');
  });

  it('answers a body over the limit with 413 payload_too_large', () => {
    expect(toDomainError(parserError(413, 'entity.too.large')).code).toBe('payload_too_large');
  });

  it('answers a path that is not valid percent-encoding with 404 not_found: it names no resource', () => {
    const undecodable = Object.assign(new URIError("Failed to decode param '%E0%A4%A'"), { status: 400 });

    expect(toDomainError(undecodable).code).toBe('not_found');
    expect(toDomainError(new BadRequestException(undecodable.message, { cause: undecodable })).code).toBe('not_found');
  });

  it('answers an unknown route with 404 not_found', () => {
    expect(toDomainError(new NotFoundException()).code).toBe('not_found');
  });

  it('hides anything unexpected behind 500 internal_error', () => {
    const sut = toDomainError(new TypeError("Cannot read properties of undefined (reading 'x')"));

    expect(sut.status).toBe(500);
    expect(sut.detail).not.toContain('undefined');
  });
});
