import { trace, type TracerProvider } from '@opentelemetry/api';
import { TraceFlush } from './tracing.js';

/** A started SDK's provider as the API holds it, whose export answers only when `answer` is called. */
function providerFlushing(): { provider: TracerProvider; flushes: number; answer: () => void } {
  const state = { flushes: 0, answer: () => {} };
  const provider = {
    getTracer: () => trace.getTracer('test'),
    forceFlush: () => {
      state.flushes++;
      return new Promise<void>((resolve) => (state.answer = resolve));
    },
  };
  return Object.assign(state, { provider });
}

describe('TraceFlush', () => {
  afterEach(() => trace.disable());

  it('sends the spans still batched when the process stops', async () => {
    const sdk = providerFlushing();
    trace.setGlobalTracerProvider(sdk.provider);
    const sut = new TraceFlush();

    const stopped = sut.onApplicationShutdown();
    sdk.answer();
    await stopped;

    expect(sdk.flushes).toBe(1);
  });

  it('stops waiting for a collector that does not answer, so the process exits in its grace period', async () => {
    const sdk = providerFlushing();
    trace.setGlobalTracerProvider(sdk.provider);
    const sut = new TraceFlush();
    sut.flushMs = 50;

    await sut.onApplicationShutdown();

    expect(sdk.flushes).toBe(1);
  });

  it('has nothing to do with tracing off', async () => {
    await expect(new TraceFlush().onApplicationShutdown()).resolves.toBeUndefined();
  });
});
