// Nest 12 ships ES modules only, so Jest runs in ESM mode (NODE_OPTIONS=--experimental-vm-modules, see package.json).
const tsJest = ['ts-jest', { useESM: true, tsconfig: 'tsconfig.check.json' }];
const common = {
  extensionsToTreatAsEsm: ['.ts'],
  moduleNameMapper: { '^(\\.{1,2}/.*)\\.js$': '$1' },
  transform: { '^.+\\.ts$': tsJest },
  testEnvironment: 'node',
};

export default {
  projects: [
    { ...common, displayName: 'unit', testMatch: ['<rootDir>/src/**/*.spec.ts'] },
    { ...common, displayName: 'integration', testMatch: ['<rootDir>/test/integration/**/*.int-spec.ts'] },
    { ...common, displayName: 'e2e', testMatch: ['<rootDir>/test/**/*.e2e-spec.ts'] },
    { ...common, displayName: 'contract', testMatch: ['<rootDir>/test/**/*.contract-spec.ts'] },
    { ...common, displayName: 'faults', testMatch: ['<rootDir>/test/faults/**/*.faults-spec.ts'] },
  ],
};
