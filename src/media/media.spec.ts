import { mediaPath, outputContentType, outputKey } from './media.js';

describe('output files', () => {
  const id = '3f6c1d2e-8a4b-4c7e-9f21-5b0d7e9a1c44';

  it("keeps the first result's names and numbers the others' from 1, all in the item's folder", () => {
    expect([0, 1, 3].map((index) => outputKey(id, 'stock', index))).toEqual([
      `${id}/stock.jpg`,
      `${id}/stock-1.jpg`,
      `${id}/stock-3.jpg`,
    ]);
    expect(mediaPath(id, 'preview', 2)).toBe(`media/${id}/preview-2.webp`);
  });

  it("gives a content type to every result's files and to no other name", () => {
    expect(['stock.jpg', 'stock-3.jpg', 'preview-1.webp'].map(outputContentType)).toEqual([
      'image/jpeg',
      'image/jpeg',
      'image/webp',
    ]);
    expect(['stock-4.jpg', 'stock-0.jpg', 'preview-1.jpg', 'stock.jpg.bak'].map(outputContentType)).toEqual([
      undefined,
      undefined,
      undefined,
      undefined,
    ]);
  });
});
