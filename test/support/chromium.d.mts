import type { Browser } from 'playwright-core';

export declare function launchBrowser(): Promise<Browser>;
