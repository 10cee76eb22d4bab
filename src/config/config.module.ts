import { type DynamicModule, Global, Module } from '@nestjs/common';
import { AppConfig } from './config.js';
import { LiveRouting } from './live-routing.js';

@Global()
@Module({})
export class ConfigModule {
  static forRoot(config: AppConfig): DynamicModule {
    return {
      module: ConfigModule,
      providers: [{ provide: AppConfig, useValue: config }, LiveRouting],
      exports: [AppConfig, LiveRouting],
    };
  }
}
