import { Controller, Get, Query } from '@nestjs/common';
import { DomainError } from '../common/problem.js';
import { AppConfig } from '../config/config.js';
import { CATALOG, findTool } from './catalog.js';
import { GenerationTypeDto, GenerationTypesQueryDto, ToolDto } from './catalog.dto.js';

@Controller('generation')
export class CatalogController {
  private readonly tools = CATALOG.map((tool) => ToolDto.from(tool));
  /** By route key (`tool` or `tool/generation_type`): the `describe` texts of each route to a model server. */
  private readonly remote: ReadonlyMap<string, Readonly<Record<string, string>>>;

  constructor(config: AppConfig) {
    this.remote = new Map(config.engineRouting.routes.map((route) => [route.key, route.describe]));
  }

  @Get('tools')
  listTools(): ToolDto[] {
    return this.tools;
  }

  @Get('generationTypes')
  listGenerationTypes(@Query() { tool }: GenerationTypesQueryDto): GenerationTypeDto[] {
    const found = findTool(tool);
    if (!found) throw new DomainError('not_found', `There is no tool "${tool}"; see /generation/tools.`);
    return GenerationTypeDto.listFor(
      found,
      (generationType) => this.remote.get(`${found.id}/${generationType}`) ?? this.remote.get(found.id),
    );
  }
}
