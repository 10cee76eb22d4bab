/** `1 job`, `2 jobs`: a number and its noun, for messages people read. */
export function count(n: number, noun: string): string {
  return `${n} ${noun}${n === 1 ? '' : 's'}`;
}
