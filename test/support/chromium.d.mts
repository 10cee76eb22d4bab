import type { Browser } from 'playwright-core';

export declare const CHROMIUM: string;
export declare function launchBrowser(): Promise<Browser>;
