// Nest 12 ships ES modules only, so Jest runs in ESM mode (NODE_OPTIONS=--experimental-vm-modules, see package.json).
const tsJest = ['ts-jest', { useESM: true, tsconfig: 'tsconfig.check.json' }];
const common = {
  extensionsToTreatAsEsm: ['.ts'],
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: { '^.+\\.ts$': tsJest },
  testEnvironment: 'node',
};

/**
 * One project per tier: a test's folder is its tier, and its file suffix names the tier too. Tiers above unit start
 * real servers and processes, and take a longer default timeout (test/support/tier-timeout.ts).
 */
const tier = (displayName, testMatch) => ({
  ...common,
  displayName,
  testMatch: [testMatch],
  ...(displayName === 'unit' ? {} : { setupFilesAfterEnv: ['<rootDir>/test/support/tier-timeout.ts'] }),
});

export default {
  projects: [
    tier('unit', '<rootDir>/src/**/*.spec.ts'),
    tier('integration', '<rootDir>/test/integration/**/*.int-spec.ts'),
    tier('api', '<rootDir>/test/api/**/*.api-spec.ts'),
    tier('browser', '<rootDir>/test/browser/**/*.browser-spec.ts'),
    tier('deploy', '<rootDir>/test/deploy/**/*.deploy-spec.ts'),
    tier('contract', '<rootDir>/test/contract/**/*.contract-spec.ts'),
    tier('faults', '<rootDir>/test/faults/**/*.faults-spec.ts'),
  ],
};
