import { Module } from '@nestjs/common';
import { User } from '../auth/user.entity.js';
import { UserRepository } from './user.repository.js';

/** The entities whose columns UserRepository's statements read by name. */
export const USER_ENTITIES = [User];

/** Users as the operators manage them: their own limits, listing and removal (the statements; `igs` runs them). */
@Module({ providers: [UserRepository], exports: [UserRepository] })
export class UsersModule {}
