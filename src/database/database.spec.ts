import pg from 'pg';
import { QueryFailedError } from 'typeorm';
import { ServiceUnavailableError } from '../common/unavailable.js';
import { translateDatabaseError } from './database.js';

/** An error as PostgreSQL answers it, with its SQLSTATE. */
function serverError(code: string): pg.DatabaseError {
  return Object.assign(new pg.DatabaseError('server said no', 0, 'error'), { code });
}

describe('translateDatabaseError', () => {
  it.each([
    ['the server shutting down (57P01)', serverError('57P01')],
    ['a connection exception (08006)', serverError('08006')],
    ['too many connections (53300)', serverError('53300')],
    ['a database that takes no connections (55000)', serverError('55000')],
    ['a refused connection', Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })],
    ['a connection dropped mid-statement', new Error('Connection terminated unexpectedly')],
    ['a pool that could not open a connection in time', new Error('timeout exceeded when trying to connect')],
    ['a server error wrapped by TypeORM', new QueryFailedError('SELECT 1', [], serverError('57P03'))],
  ])('makes %s the database being unavailable', (_case, error) => {
    const sut = translateDatabaseError(error);

    expect(sut).toBeInstanceOf(ServiceUnavailableError);
    expect((sut as ServiceUnavailableError).service).toBe('database');
    expect((sut as Error).cause).toBe(error);
  });

  it.each([
    ['a unique violation (23505)', serverError('23505')],
    ['a syntax error (42601)', serverError('42601')],
    ['a check violation wrapped by TypeORM', new QueryFailedError('UPDATE', [], serverError('23514'))],
    ['a value the driver could not serialise', new TypeError('Converting circular structure to JSON')],
  ])("passes %s on as it is: the statement's own failure, not an outage", (_case, error) => {
    expect(translateDatabaseError(error)).toBe(error);
  });
});
