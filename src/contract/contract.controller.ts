import { Controller, Get, Header, Req } from '@nestjs/common';
import type { Request } from 'express';
import { Public } from '../common/public.js';
import { AppConfig } from '../config/config.js';
import { Contract, servedServer } from './contract.js';

/**
 * Serves the contract file itself, so clients and Swagger UI read exactly what the tests check, but for its servers:
 * the service as this request reached it (the committed file documents the development server).
 */
@Public()
@Controller()
export class ContractController {
  constructor(
    private readonly contract: Contract,
    private readonly config: AppConfig,
  ) {}

  @Get('openapi.json')
  json(@Req() request: Request): Record<string, unknown> {
    return this.contract.documentFor(servedServer(this.config, request));
  }

  @Get('openapi.yaml')
  @Header('Content-Type', 'application/yaml; charset=utf-8')
  yaml(@Req() request: Request): string {
    return this.contract.yamlFor(servedServer(this.config, request));
  }
}
