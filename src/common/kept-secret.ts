import { link, readFile, rm, writeFile } from 'node:fs/promises';

/**
 * The secret kept in `file`, made by `make` on the first call; a file whose content does not match `valid` (an empty
 * one a crash left) is made anew. Safe for processes starting at once: each reads the one that won.
 */
export async function keptSecret(file: string, valid: RegExp, make: () => string): Promise<string> {
  for (;;) {
    const kept = await readFile(file, 'utf8').catch((error: NodeJS.ErrnoException) => {
      if (error.code === 'ENOENT') return undefined;
      throw error;
    });
    if (kept !== undefined && valid.test(kept.trim())) return kept.trim();
    // Written whole under another name, then linked into place: the file never exists half-written, and of two
    // processes starting at once, the one that links second reads the first's.
    const draft = `${file}.${process.pid}`;
    await writeFile(draft, make(), { mode: 0o600 });
    try {
      if (kept !== undefined) await rm(file);
      await link(draft, file);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    } finally {
      await rm(draft, { force: true });
    }
  }
}
