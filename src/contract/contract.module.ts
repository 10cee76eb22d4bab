import { Module } from '@nestjs/common';
import { ContractController } from './contract.controller.js';
import { Contract } from './contract.js';

@Module({
  controllers: [ContractController],
  providers: [{ provide: Contract, useFactory: () => Contract.load() }],
  exports: [Contract],
})
export class ContractModule {}
