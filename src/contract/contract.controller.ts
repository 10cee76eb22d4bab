import { Controller, Get, Header } from '@nestjs/common';
import { Public } from '../common/public.js';
import { Contract } from './contract.js';

/** Serves the contract file itself, so clients and Swagger UI read exactly what the tests check. */
@Public()
@Controller()
export class ContractController {
  constructor(private readonly contract: Contract) {}

  @Get('openapi.json')
  json(): Record<string, unknown> {
    return this.contract.document;
  }

  @Get('openapi.yaml')
  @Header('Content-Type', 'application/yaml; charset=utf-8')
  yaml(): string {
    return this.contract.yaml;
  }
}
