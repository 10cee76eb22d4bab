import { DomainError } from './problem.js';
import { preferredWait } from './prefer.js';

describe('preferredWait', () => {
  it.each([
    ['wait=5', 5],
    ['WAIT = 60', 60],
    ['respond-async, wait=10', 10],
    [['code=200', 'wait=1'], 1],
    ['code=200, example=complete', undefined],
    ['wait="5"', 5],
    ['wait=5; x', 5],
    ['wait = 7 ;foo="a,b", respond-async', 7],
    ['wait=0005', 5],
    ['example="wait=3, x", wait=4', 4],
    [undefined, undefined],
  ])('reads %j as %j', (header, expected) => {
    expect(preferredWait(header)).toBe(expected);
  });

  it.each(['wait=0', 'wait=61', 'wait=', 'wait=abc', 'wait=1.5', 'wait=-3', 'wait="x"', 'wait', 'wait=0060000000000'])(
    'answers %j with 400 validation_failed naming Prefer',
    (header) => {
      const sut = (() => {
        try {
          preferredWait(header);
        } catch (error) {
          return error;
        }
      })();

      expect(sut).toBeInstanceOf(DomainError);
      expect((sut as DomainError).code).toBe('validation_failed');
      expect((sut as DomainError).options.errors).toEqual([{ field: 'Prefer', message: expect.any(String) }]);
    },
  );
});
