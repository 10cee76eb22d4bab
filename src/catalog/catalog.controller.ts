import { Controller, Get, Query } from '@nestjs/common';
import { AppConfig } from '../config/config.js';
import { CATALOG } from './catalog.js';
import { GenerationTypeDto, GenerationTypesQueryDto, toolAskedFor, ToolDto } from './catalog.dto.js';

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
    const found = toolAskedFor(tool);
    return GenerationTypeDto.listFor(
      found,
      (generationType) => this.remote.get(`${found.id}/${generationType}`) ?? this.remote.get(found.id),
    );
  }
}
